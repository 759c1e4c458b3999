"""What an operator does to a route, for the admin API and ``cutover routes`` alike.

Every change is validated whole before anything is written (an unknown route, a percent
outside 0-100, a provider that is not configured, a malformed threshold or policy: a
``NotFound`` or ``ContractViolation`` naming the problem, and nothing changes), then
applied and audited in one transaction (:meth:`gateway.store.routes.RouteBook.change`).
See docs/canary.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import asdict
from typing import Any, overload

from pydantic import TypeAdapter, ValidationError

from contracts.errors import Conflict, ContractViolation, NotFound
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.rollout.guardloop import route_numbers
from gateway.rollout.spec import AuditEntry, RouteSpec
from gateway.store.routes import RouteBook
from gateway.translation.maps import MapSpec, map_problems

__all__ = ["CHANGEABLE", "MAX_REASON_CHARS", "RouteControl", "parse_percent", "reason_problem"]

_DECIMAL = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")

#: Spec fields the admin API's PATCH may change.
CHANGEABLE = frozenset(RouteSpec.model_fields)

#: The longest reason a change keeps (docs/canary.md 'Audit'): a sentence or a paragraph,
#: not a pasted log, which every listing of the audit would print back.
MAX_REASON_CHARS = 1000


def reason_problem(reason: Any) -> str | None:
    """What is wrong with a change's reason (empty, or over :data:`MAX_REASON_CHARS`), or
    None; the admin API answers it as a 422, ``cutover routes`` as a usage error."""
    if not isinstance(reason, str) or not reason.strip():
        return "a route change needs a reason (--reason TEXT)"
    if len(reason) > MAX_REASON_CHARS:
        return (f"a route change's reason is {len(reason)} characters; "
                f"at most {MAX_REASON_CHARS} are kept (docs/canary.md 'Audit')")
    return None


def parse_percent(value: Any, what: str = "percent") -> float:
    """A percent from 0 to 100 (a number, or its text form on the command line).

    Raises
    ------
    ContractViolation
        Not a number, not finite, or outside 0-100.
    """
    if isinstance(value, bool) or (isinstance(value, str) and not _DECIMAL.fullmatch(value)):
        # float() took "1_0" as 10 and "٣" as 3: a typo set a canary nobody typed
        raise ContractViolation(f"{what} must be a number from 0 to 100, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ContractViolation(f"{what} must be a number from 0 to 100, got {value!r}") from None
    if not math.isfinite(number) or not 0 <= number <= 100:
        raise ContractViolation(f"{what} must be from 0 to 100, got {value!r}")
    return number


class RouteControl:
    """Route changes and reports.

    Parameters
    ----------
    book : RouteBook
        The routes in the store.
    routes : Collection[str]
        The configured route names (``model`` or ``model:version``).
    providers : Collection[str]
        The configured provider names: a change may only name these.
    """

    def __init__(
        self,
        book: RouteBook,
        *,
        routes: Collection[str],
        providers: Collection[str],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._book = book
        self._routes = list(routes)
        self._providers = set(providers)
        self._clock = clock

    def _known(self, key: str) -> str:
        if key not in self._routes:
            known = ", ".join(self._routes) or "none"
            raise NotFound(f"route {key!r} does not exist (configured routes: {known})")
        return key

    async def set_canary(self, key: str, percent: Any, *, who: str, reason: str) -> AuditEntry:
        """Send ``percent`` of the route's callers to its candidate."""
        value = parse_percent(percent, "canary percent")
        return await self.change(key, {"canary_percent": value}, who=who, reason=reason,
                                 action="set-canary")

    async def rollback(self, key: str, *, who: str, reason: str) -> AuditEntry:
        """Canary back to 0: every new prediction goes to the control."""
        return await self.change(key, {"canary_percent": 0.0}, who=who, reason=reason,
                                 action="rollback")

    async def set_shadow(self, key: str, percent: Any, *, who: str, reason: str) -> AuditEntry:
        """Shadow ``percent`` of the route's control predictions on its candidate."""
        value = parse_percent(percent, "shadow percent")
        return await self.change(key, {"shadow_percent": value}, who=who, reason=reason,
                                 action="set-shadow")

    async def set_map(self, key: str, provider: str, *, input_map: str | None,
                      output_map: str | None, who: str, reason: str) -> AuditEntry:
        """Give route ``key`` these maps for ``provider`` (neither: remove its maps),
        keeping its other providers' maps (docs/translation.md); ``Conflict`` when the
        route's maps changed meanwhile."""
        spec = await self.spec(key)
        maps = {name: m.model_dump() for name, m in spec.maps.items()}
        if input_map is None and output_map is None:
            maps.pop(provider, None)
        else:
            maps[provider] = {"input": input_map, "output": output_map}
        return await self._guarded(key, {"maps": maps}, who=who, reason=reason, action="set-map",
                                   still=lambda now: now.maps == spec.maps)

    async def promote(self, key: str, *, who: str, reason: str) -> AuditEntry:
        """Make the candidate the control at 100 %: the candidate becomes ``provider``,
        the route has no candidate any more, canary and shadow go to 0; the audit keeps
        the spec before (docs/canary.md, "Promote").

        Raises
        ------
        Conflict
            The route has no candidate, or its candidate changed while promoting.
        """
        spec = await self.spec(key)
        if not spec.candidate:
            raise Conflict(f"route {key!r} has no candidate to promote; its control is "
                           f"{spec.provider!r}")
        update = {"provider": spec.candidate, "candidate": None, "canary_percent": 0.0,
                  "shadow_percent": 0.0}
        return await self._guarded(key, update, who=who, reason=reason, action="promote",
                                   still=lambda now: now.candidate == spec.candidate)

    async def pause_guard(self, key: str, *, who: str, reason: str) -> AuditEntry:
        """Stop the route's guard from rolling back (it still counts); audited.

        Raises
        ------
        Conflict
            The route has no guard, or it is paused already.
        """
        spec = await self.spec(key)
        if spec.guard is None:
            raise Conflict(f"route {key!r} has no guard to pause")
        if spec.guard_paused:
            raise Conflict(f"the guard of route {key!r} is paused already")
        return await self._guarded(key, {"guard_paused": True}, who=who, reason=reason,
                                   action="pause-guard", still=lambda now: not now.guard_paused)

    async def resume_guard(self, key: str, *, who: str, reason: str) -> AuditEntry:
        """Let a paused guard act again; audited (``Conflict`` when it is not paused)."""
        spec = await self.spec(key)
        if not spec.guard_paused:
            raise Conflict(f"the guard of route {key!r} is not paused")
        return await self._guarded(key, {"guard_paused": False}, who=who, reason=reason,
                                   action="resume-guard", still=lambda now: now.guard_paused)

    async def _guarded(
        self, key: str, update: dict[str, Any], *, who: str, reason: str, action: str,
        still: Callable[[RouteSpec], bool],
    ) -> AuditEntry:
        """:meth:`change`, applied only while ``still`` holds in the change's transaction
        (another change in between: ``Conflict``, nothing written)."""
        entry = await self.change(key, update, who=who, reason=reason, action=action,
                                  only_if=still)
        if entry is None:
            raise Conflict(f"route {key!r} changed meanwhile; look again and retry")
        return entry

    @overload
    async def change(
        self, key: str, update: dict[str, Any], *, who: str, reason: str, action: str = ...,
        only_if: None = None,
    ) -> AuditEntry: ...

    @overload
    async def change(
        self, key: str, update: dict[str, Any], *, who: str, reason: str, action: str = ...,
        only_if: Callable[[RouteSpec], bool],
    ) -> AuditEntry | None: ...

    async def change(
        self, key: str, update: dict[str, Any], *, who: str, reason: str, action: str = "update",
        only_if: Callable[[RouteSpec], bool] | None = None,
    ) -> AuditEntry | None:
        """Apply ``update`` (spec fields) to route ``key``, audited; with ``only_if``, only
        while it holds for the spec in the change's transaction (else None, nothing written).

        Raises
        ------
        NotFound
            Unknown route.
        ContractViolation
            Unknown field, unknown provider, an empty reason or one over
            :data:`MAX_REASON_CHARS`, or an invalid spec.
        """
        self._known(key)
        unknown = sorted(set(update) - CHANGEABLE)
        if unknown:
            raise ContractViolation(
                f"unknown route field(s) {', '.join(unknown)}; "
                f"changeable: {', '.join(sorted(CHANGEABLE))}"
            )
        for field in ("provider", "candidate"):
            name = update.get(field)
            if name is not None and name not in self._providers:
                raise ContractViolation(f"{field} {name!r} is not a configured provider")
        if "maps" in update:
            self._check_maps(key, update["maps"])
        if problem := reason_problem(reason):
            raise ContractViolation(problem)
        entry = await self._book.change(key, who=who, action=action, reason=reason,
                                        update=update, only_if=only_if)
        assert entry is not None or only_if is not None
        return entry

    def _check_maps(self, key: str, maps: Any) -> None:
        """A live ``maps`` change names configured providers and compiles, else a
        ``ContractViolation`` naming the route (and jq's message); nothing changes."""
        try:
            parsed = TypeAdapter(dict[str, MapSpec]).validate_python(maps)
        except ValidationError as exc:
            raise ContractViolation(f"route {key!r}: maps must be "
                                    '{"PROVIDER": {"input": "JQ", "output": "JQ"}}: '
                                    f"{exc.errors(include_url=False)[0]['msg']}") from None
        unknown = sorted(set(parsed) - self._providers)
        if unknown:
            raise ContractViolation(f"route {key!r}: maps for {', '.join(unknown)}, "
                                    "not configured provider(s)")
        if problems := map_problems(parsed):
            raise ContractViolation(f"route {key!r}: " + "; ".join(problems))

    async def spec(self, key: str) -> RouteSpec:
        """The stored spec of a configured route (``NotFound`` otherwise)."""
        return await self._book.get(self._known(key))

    async def describe(self, key: str, history: int = 20) -> dict[str, Any]:
        """Route ``key``: its spec, per-arm numbers as the guard judges them
        (:func:`gateway.rollout.guardloop.route_numbers`: the window's start ``since``,
        ``as_of``, ``stuck_after_s``), its changes."""
        spec = await self._book.get(self._known(key))
        numbers = await route_numbers(self._book, key, spec, self._clock.now())
        arms = {"control": {"provider": spec.provider, **asdict(numbers.control)}}
        if spec.candidate:
            arms["candidate"] = {"provider": spec.candidate, **asdict(numbers.candidate)}
        changes = await self._book.history(key, limit=history)
        return {
            "route": key,
            "spec": spec.stored(),
            "window_s": numbers.window_s,
            "since": numbers.since.isoformat(),
            "as_of": numbers.at.isoformat(),
            "stuck_after_s": numbers.stuck_after_s,
            "arms": arms,
            "changes": [c.model_dump(mode="json") for c in changes],
        }

    async def listing(self) -> list[dict[str, Any]]:
        """Every configured route with its spec."""
        _, specs = await self._book.load()
        return [{"route": k, "spec": specs[k].stored()} for k in self._routes if k in specs]

    async def history(self, key: str | None, limit: int = 100) -> list[dict[str, Any]]:
        """Audit entries (of route ``key``, or of all when None), newest first, as JSON."""
        if key is not None:
            self._known(key)
        return [e.model_dump(mode="json") for e in await self._book.history(key, limit)]
