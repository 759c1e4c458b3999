"""Input validation against a model's schema, before anything is stored or sent.

A route's schema is a Cog-style OpenAPI document (``components.schemas.Input``, with
choices as ``allOf``/``$ref`` to enum schemas), given inline, as a path to a JSON file,
or read once from the provider (a built Cog image serves ``/openapi.json``). ``input`` is
checked with ``jsonschema`` (the draft the schema declares, else 2020-12): a wrong type, a
value out of range or outside its choices, or a missing required field is refused with a
422 whose detail names each field (docs/replicate-api.md §5.1; docs/validation.md). A field
the model does not declare is dropped, as Cog drops it (litellm sends ``stream``,
llama-index ``max_length``), and named in the prediction's logs; a route with
``strict_inputs = true`` refuses it instead. Formats are not asserted: a file input
(``format: uri``) may be an URL or a ``data:`` URI alike.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contracts.errors import ConfigurationError, ContractViolation

if TYPE_CHECKING:
    from jsonschema import ValidationError

__all__ = [
    "DROPPED_NOTE", "PROVIDER_SCHEMA", "RESCUED_NOTE", "TELLING_KINDS", "CheckedInput",
    "InputInvalid", "InputValidator", "Schemas", "load_schema", "model_target", "noted_logs",
    "schema_problem", "schema_unknown",
]

#: ``openapi_schema = "provider"``: read the schema once from the route's provider.
PROVIDER_SCHEMA = "provider"
#: A route without ``openapi_schema``: how long its provider may take to give its schema,
#: and when a provider that could not tell is asked again (seconds).
ASK_TIMEOUT_S = 5.0
ASK_AGAIN_S = 30.0
Fetch = Callable[[str, str], Awaitable[dict[str, Any]]]

log = logging.getLogger(__name__)

_MAX_REPORTED = 10


#: The first line of a prediction's logs when undeclared input fields were dropped.
DROPPED_NOTE = "Stripped unknown input fields: "
#: How the logs of a prediction moved to the control at a rollback start
#: (:mod:`gateway.store.rescue`, docs/canary.md "Rescue on rollback").
RESCUED_NOTE = "Moved to the control: "
_NOTES = (DROPPED_NOTE, RESCUED_NOTE)


class InputInvalid(ContractViolation):
    """``input`` does not match the model's schema (422); the detail names the fields."""

    title = "Invalid input"


@dataclass(frozen=True)
class CheckedInput:
    """A valid input as the provider gets it: ``input`` without the undeclared fields,
    ``dropped`` their names (sorted; empty when nothing was dropped)."""

    input: dict[str, Any]
    dropped: tuple[str, ...] = ()

    @property
    def note(self) -> str | None:
        """The line the prediction's logs start with, naming ``dropped``; None if empty."""
        return f"{DROPPED_NOTE}{', '.join(self.dropped)}\n" if self.dropped else None


def noted_logs(job_logs: str | None, provider_logs: str | None) -> str | None:
    """``provider_logs`` behind the gateway's note lines the job's logs start with
    (:data:`DROPPED_NOTE`, :data:`RESCUED_NOTE`; providers send their whole log each
    time, the notes stay first)."""
    if provider_logs is None or not job_logs:
        return provider_logs
    notes = ""
    for line in job_logs.splitlines(keepends=True):
        if not line.startswith(_NOTES):
            break
        notes += line if line.endswith("\n") else line + "\n"
    if not notes or provider_logs.startswith(notes):
        return provider_logs
    return notes + provider_logs


def load_schema(value: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The OpenAPI document given inline or as a path to a JSON file.

    Raises
    ------
    ConfigurationError
        The file is missing or is not a JSON object.
    """
    if isinstance(value, dict):
        return value
    path = Path(value).expanduser()
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"openapi_schema file {path} is unreadable: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"openapi_schema file {path} is not a JSON object")
    return loaded


def schema_problem(source: dict[str, Any] | str | None) -> str | None:
    """Why a route's ``openapi_schema`` (inline or a file) cannot be used, or None; a
    provider's own schema is read at the first create. ``cutover check`` names it, so a
    file that does not load stops the start, not every create on the route."""
    if source is None or source == PROVIDER_SCHEMA:
        return None
    try:
        InputValidator(load_schema(source))
    except ConfigurationError as exc:
        return exc.detail
    return None


#: Provider kinds whose adapter can give a route's schema (``model_schema``).
TELLING_KINDS = frozenset({"cog", "replicate", "openai"})

UNKNOWN_SCHEMA_COST = (
    "inputs are not validated (a wrong type reaches the provider), undeclared fields are "
    "not dropped, outputs are not checked against the model's Output, and its version "
    "object says the schema is unknown (integrations that read it, such as langchain's "
    "Replicate LLM, fail); set openapi_schema on the route (docs/validation.md)"
)


def schema_unknown(source: dict[str, Any] | str | None, provider_kind: str | None) -> str | None:
    """Why a route's model schema is unknown, without calling anyone, or None when it is
    given or its provider can tell (``cutover check`` warns with it)."""
    if source is not None or provider_kind in TELLING_KINDS:
        return None
    return f"no model schema: provider kind {provider_kind!r} cannot tell it, so " + (
        UNKNOWN_SCHEMA_COST
    )


class InputValidator:
    """Checks prediction inputs against one OpenAPI document's ``Input`` schema.

    Raises
    ------
    ConfigurationError
        (from the constructor) The document has no ``components.schemas.Input`` object,
        or that schema is not a valid JSON schema.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        components = document.get("components")
        schemas = components.get("schemas") if isinstance(components, dict) else None
        if not isinstance(schemas, dict) or not isinstance(schemas.get("Input"), dict):
            raise ConfigurationError("the model schema has no components.schemas.Input object")
        schemas = copy.deepcopy(schemas)
        declared = schemas["Input"]
        # Undeclared fields are the validator's to drop (or refuse, strict): a schema
        # that allows them itself (``additionalProperties``) keeps them.
        self._closed = "properties" in declared and "additionalProperties" not in declared
        if self._closed:
            declared["additionalProperties"] = False
        self._properties = set(declared.get("properties", {}))
        root = {"$ref": "#/components/schemas/Input", "components": {"schemas": schemas}}
        # jsonschema loads only when a route has a schema (it is slow to import: start-up)
        from jsonschema import Draft202012Validator, validators
        from jsonschema.exceptions import SchemaError

        cls = validators.validator_for(declared, default=Draft202012Validator)
        try:
            cls.check_schema(declared)
        except SchemaError as exc:
            raise ConfigurationError(f"the model's Input schema is invalid: {exc.message}") from exc
        self._validator = cls(root)

    def check(self, value: dict[str, Any], *, strict: bool = False) -> CheckedInput:
        """``value`` without the fields the model does not declare, if the rest is valid.

        ``strict``: an undeclared field is a problem too (``strict_inputs = true``).

        Raises
        ------
        InputInvalid
            Listing up to ten problems as ``input.<field>: <what is wrong>``.
        """
        unknown = sorted(set(value) - self._properties) if self._closed else []
        if unknown and not strict:
            value = {k: v for k, v in value.items() if k in self._properties}
        problems = sorted(
            {self._describe(error, value) for error in self._validator.iter_errors(value)}
        )
        if problems:
            shown = "; ".join(problems[:_MAX_REPORTED])
            more = len(problems) - _MAX_REPORTED
            raise InputInvalid(shown + (f"; and {more} more" if more > 0 else ""))
        return CheckedInput(value, () if strict else tuple(unknown))

    def _describe(self, error: ValidationError, value: dict[str, Any]) -> str:
        path = ".".join(str(part) for part in error.absolute_path)
        where = f"input.{path}" if path else "input"
        if error.validator == "required" and not path:
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            return f"input.{missing}: is required"
        if error.validator == "additionalProperties" and not path:
            unknown = sorted(set(value) - self._properties)
            return "; ".join(f"input.{name}: is not an input of this model" for name in unknown)
        return f"{where}: {_message(error)}"


def _message(error: ValidationError) -> str:
    """jsonschema's message, minus the offending value when it is long (no echo of
    large payloads into responses)."""
    text = error.message
    return text if len(text) <= 200 else text[:197] + "..."


class _Route(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def openapi_schema(self) -> dict[str, Any] | str | None: ...

    @property
    def strict_inputs(self) -> bool: ...

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str | None: ...

    @property
    def target(self) -> str | None: ...


def model_target(route: _Route) -> str:
    """The provider's name for the route's model: its ``target``, else ``model[:version]``."""
    if route.target:
        return route.target
    return f"{route.model}:{route.version}" if route.version else route.model


class Schemas:
    """Each route's schema document and validator, loaded once and kept.

    A route without ``openapi_schema`` asks its provider, wherever the provider can tell
    (a Cog server's ``/openapi.json``, the upstream version of a ``replicate`` provider,
    the ``openai`` adapter's own language-model schema), within
    :data:`ASK_TIMEOUT_S`; a provider that cannot tell (or cannot be reached) leaves the
    schema unknown, asked again after :data:`ASK_AGAIN_S` (docs/validation.md).

    Parameters
    ----------
    fetch : callable
        ``await fetch(provider_name, target)``: the provider's own OpenAPI document for the
        route's model (``target``: the route's target, else ``model[:version]``).
    """

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._documents: dict[tuple[Any, ...], dict[str, Any] | None] = {}
        self._unknown_until: dict[tuple[Any, ...], float] = {}
        self._validators: dict[tuple[Any, ...], tuple[Any, InputValidator | None]] = {}
        self._inline: list[Any] = []  # keeps inline documents alive, so ids stay theirs
        self._locks: dict[tuple[Any, ...], asyncio.Lock] = {}  # one per route's source

    async def document(self, route: _Route) -> dict[str, Any] | None:
        """The route's schema document, or None when it declares none.

        Raises
        ------
        ConfigurationError
            The file is unreadable or the provider could not give its schema.
        """
        key = self._key(route)
        if key not in self._documents or self._ask_again(key):
            async with self._locks.setdefault(key, asyncio.Lock()):
                if key not in self._documents or self._ask_again(key):
                    self._documents[key] = await self._load(route)
                    self._unknown_until.pop(key, None)
                    if self._documents[key] is None and route.openapi_schema is None:
                        self._unknown_until[key] = time.monotonic() + ASK_AGAIN_S
        return self._documents[key]

    def _ask_again(self, key: tuple[Any, ...]) -> bool:
        until = self._unknown_until.get(key)
        return until is not None and time.monotonic() >= until

    def cached(self, route: _Route) -> dict[str, Any] | None:
        """The route's document if this process has loaded it already, else None (no
        I/O: for the hot path of interim outputs)."""
        return self._documents.get(self._key(route))

    def held(self, route: _Route) -> bool:
        """Whether :meth:`document` of ``route`` answers from what this process holds, with
        no I/O (no provider asked, no file read): loaded already and, when the provider
        could not tell, not due to be asked again. Itself no I/O (for the webhook fast
        path, :meth:`gateway.intake.Intake._finishing`)."""
        key = self._key(route)
        return key in self._documents and not self._ask_again(key)

    def _key(self, route: _Route) -> tuple[Any, ...]:
        source = route.openapi_schema
        if isinstance(source, dict):
            if not any(kept is source for kept in self._inline[-64:]):
                self._inline.append(source)
            return ("inline", id(source))
        return (route.provider, source, model_target(route))

    async def _load(self, route: _Route) -> dict[str, Any] | None:
        source = route.openapi_schema
        if source is None:
            try:
                return await asyncio.wait_for(
                    self._fetch(route.provider, model_target(route)), ASK_TIMEOUT_S
                )
            except (ConfigurationError, TimeoutError) as exc:
                why = exc.detail if isinstance(exc, ConfigurationError) else "no answer in time"
                log.info("model_schema_unknown", extra={"provider": route.provider,
                                                        "model": route.model, "error": why})
                return None
        if source == PROVIDER_SCHEMA:
            return await self._fetch(route.provider, model_target(route))
        return await asyncio.to_thread(load_schema, source)

    async def check(
        self, route: _Route, value: dict[str, Any], job_id: str = ""
    ) -> CheckedInput:
        """``value`` as the provider gets it (undeclared fields dropped, unless the route
        has ``strict_inputs``, and logged as ``input_fields_dropped`` with ``job_id``),
        if valid; routes without a schema accept any input.

        Raises
        ------
        InputInvalid
            ``value`` does not match (the detail names the fields).
        ConfigurationError
            The route's schema cannot be loaded or is not a valid model schema.
        """
        key = self._key(route)
        document = await self.document(route)
        made = self._validators.get(key)
        if made is None or made[0] is not document:
            made = (document, InputValidator(document) if document else None)
            self._validators[key] = made
        validator = made[1]
        if validator is None:
            return CheckedInput(value)
        checked = validator.check(value, strict=route.strict_inputs)
        if checked.dropped:
            log.info("input_fields_dropped", extra={
                "job_id": job_id, "model": route.model, "fields": list(checked.dropped)})
        return checked
