"""Which map a prediction runs, and running it (docs/translation.md).

A job's maps are its route's live ``maps`` for the provider serving it (the control, the
canary's candidate, a shadow or baseline run alike: they are chosen by the job's
provider); without an ``input`` map there, the adapter's own default (the ``openai``
adapter's Replicate-style -> OpenAI-compatible mapping,
:data:`contracts.snapshot.Capabilities.input_map`); without either, the value passes
as it is. The dispatcher calls :meth:`Translator.input` before the adapter; the finalizer
calls :meth:`Translator.output` on the final output and on interim ones within its
budget (:class:`gateway.finalizer.InterimBudget`), before files are copied to owned
storage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contracts.errors import NotFound
from contracts.job import Job
from gateway.translation import maps
from gateway.translation.maps import MapError, MapSpec

__all__ = ["Translator"]


class Translator:
    """Resolves and runs a job's maps.

    Parameters
    ----------
    maps_of : Callable[[str], Mapping[str, MapSpec]]
        Route name -> its live ``maps`` (``router.spec(key).maps``); ``NotFound`` for a
        route no longer configured.
    default_inputs : Mapping[str, str | None]
        Provider name -> its adapter's default input map (a jq program), if any.
    """

    def __init__(self, maps_of: Callable[[str], Mapping[str, MapSpec]],
                 default_inputs: Mapping[str, str | None]) -> None:
        self._maps_of = maps_of
        self._defaults = dict(default_inputs)

    def spec(self, route: str, provider: str) -> MapSpec:
        """The maps ``provider`` runs for ``route``: the route's, the adapter's default
        input map where the route has none."""
        try:
            own = self._maps_of(route).get(provider)
        except NotFound:  # a job of a route no longer configured
            own = None
        default = self._defaults.get(provider)
        if own is None:
            return MapSpec(input=default)
        return own if own.input is not None or default is None else MapSpec(
            input=default, output=own.output)

    def input(self, job: Job, provider: str, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` (the job's input) as ``provider`` takes it.

        Raises
        ------
        MapError
            The map failed, or gave something other than a JSON object.
        """
        program = self.spec(job.route, provider).input
        if program is None:
            return value
        return input_of(program, value, provider)

    def maps_output(self, job: Job) -> bool:
        """Whether the job's route has an output map for the job's provider."""
        return self.spec(job.route, job.provider).output is not None

    def output(self, job: Job, value: Any) -> Any:
        """The provider's output ``value`` as the app sees it (None stays None).

        Raises
        ------
        MapError
            The map failed.
        """
        program = self.spec(job.route, job.provider).output
        if program is None or value is None:
            return value
        return maps.run(program, value, what=f"the output map of provider {job.provider!r}")


def input_of(program: str, value: dict[str, Any], provider: str) -> dict[str, Any]:
    """``program`` run on an input: one JSON object without its top-level ``null``
    values (``{prompt, seed}`` sends no ``seed`` when the app gave none; a provider
    then applies its own default: docs/translation.md, "Input maps"), or a
    :class:`MapError`."""
    mapped = maps.run(program, value, what=f"the input map of provider {provider!r}")
    if not isinstance(mapped, dict):
        raise MapError(f"the input map of provider {provider!r} gave "
                       f"{type(mapped).__name__}, not a JSON object")
    return {key: item for key, item in mapped.items() if item is not None}
