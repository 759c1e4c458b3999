"""Replaying a route's recorded inputs against its candidate (docs/cutover-day.md,
"Replaying recorded inputs").

:class:`ReplayControl` starts, stops and resumes replays for the admin API and
``cutover shadow replay``, refusing bad input before anything is written. A start only
writes the replay's row (:mod:`gateway.store.replays`); the work is done inside the
serving gateway processes by :class:`Replayer`, a loop in every one of them: it leases
each running replay (one process at a time advances a replay) and, round after round,
hands out as many of its recorded inputs as the route's shadow budget has room for
(``shadow_budget.max_concurrent`` minus the route's shadows running or waiting, live or
replayed, and no more than ``max_per_hour`` allows), each as a shadow job on the
candidate and, for ``baseline_percent`` of them (evenly spread), one on the control
again. These are ordinary shadow jobs (hidden arms, no webhook, their input by reference
to the recorded prediction), so the dispatcher sends them like a live prediction's
shadows, the budget gate counts them, and the pairs are compared and reported as live
ones are, but apart: a replay's report holds its pairs alone, and the live report and
the canary guard never see them. Inputs the route's ``shadow_policy`` refuses are
counted as skipped and never sent. A replay is finished once every input was handed out
and every job it made is terminal.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from contracts.errors import Conflict, ContractViolation, NotFound
from contracts.times import parse_time
from gateway import ids
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.rollout.router import Router
from gateway.rollout.shadowgate import SHADOW_PRIORITY
from gateway.rollout.spec import RouteSpec, route_key
from gateway.store.records import NewJob
from gateway.store.replays import RecordedInput, Replay, ReplayStore
from gateway.store.shadows import ShadowStore

__all__ = ["MAX_INPUTS", "ReplayControl", "Replayer", "parse_since", "recorded_routes"]

log = logging.getLogger(__name__)

MAX_INPUTS = 100_000
"""The largest ``limit`` a replay takes (a report aggregates the newest 1,000 pairs)."""
IDLE_S = 2.0
"""How long an idle replay loop sleeps: a replay started elsewhere (``cutover shadow
replay`` on the gateway's host) begins within this."""
_AGO_RE = re.compile(r"^(\d+)([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_since(text: str, now: datetime, name: str = "--since") -> datetime:
    """``30d``/``12h``/``90m`` before ``now``, or an ISO 8601 time (not after ``now``).

    Raises
    ------
    ContractViolation
        Anything else, naming ``name``, or a time in the future.
    """
    match = _AGO_RE.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    since = parse_time(text, name)
    if since > now:
        raise ContractViolation(f"{name} {since.isoformat()} is in the future (now "
                                f"{now.isoformat(timespec='seconds')}): no recorded input "
                                "is in that window")
    return since


def recorded_routes(router: Router, route: str) -> tuple[str, ...]:
    """The ``jobs.route`` values of ``route``'s recorded inputs: its own name and, for a
    route with a version, its model's, under which imported and adopted predictions are
    stored (docs/cutover-day.md)."""
    for settings in router.routes:
        if route_key(settings.model, settings.version) == route:
            return (route,) if settings.version is None else (route, settings.model)
    raise NotFound(f"route {route!r} does not exist")


def _limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractViolation(f"limit must be a whole number from 1 to {MAX_INPUTS}, "
                                f"got {value!r}")
    if not 1 <= value <= MAX_INPUTS:
        raise ContractViolation(f"limit must be from 1 to {MAX_INPUTS}, got {value}")
    return value


def _percent(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractViolation(f"baseline_percent must be a number from 0 to 100, got {value!r}")
    if not 0 <= value <= 100:
        raise ContractViolation(f"baseline_percent must be from 0 to 100, got {value:g}")
    return float(value)


class ReplayControl:
    """Starts, stops and resumes replays (see the module docstring).

    Parameters
    ----------
    replays : ReplayStore
        The replay rows.
    router : Router
        The configured routes (their names, models and versions).
    spec : callable
        ``await spec(route)``: the route's stored spec; ``NotFound`` for an unknown route.
    notifier : Notifier or None
        Wakes this process's replay loop at a start or resume.
    """

    def __init__(self, replays: ReplayStore, router: Router,
                 spec: Callable[[str], Awaitable[RouteSpec]], *,
                 notifier: Notifier | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.replays = replays
        self._router = router
        self._spec = spec
        self._notifier = notifier
        self._clock = clock

    async def start(self, route: str, *, since: str | None = None, limit: Any = None,
                    baseline_percent: Any = None, who: str) -> Replay:
        """A new running replay of ``route``'s inputs created since ``since`` (``7d``,
        ``12h``, ``90m`` or ISO 8601; None: all kept), the newest ``limit`` of them
        (None: all), ``baseline_percent`` of them also on the control (None: the
        route's ``baseline_percent``).

        Raises
        ------
        NotFound
            An unknown route.
        Conflict
            The route has no candidate, no ``shadow_policy``, or a running replay.
        ContractViolation
            A bad ``since``, ``limit`` (1..100,000) or ``baseline_percent`` (0..100).
        """
        spec = await self._spec(route)
        keys = recorded_routes(self._router, route)
        start = parse_since(since, self._clock.now(), "since") if since else None
        max_inputs = _limit(limit)
        percent = _percent(baseline_percent, spec.baseline_percent)
        if spec.candidate is None:
            raise Conflict(f"route {route!r} has no candidate: there is nothing to replay its "
                           "inputs on (set one: cutover routes change ROUTE --set candidate=...)")
        if spec.shadow_policy is None:
            raise Conflict(f"route {route!r} has no shadow_policy: no input may be shadowed, "
                           "so none may be replayed (docs/shadow.md, \"Inputs\")")
        replay = await self.replays.start(route, keys, since=start, max_inputs=max_inputs,
                                          baseline_percent=percent, who=who)
        log.info("replay_started", extra={"replay_id": replay.id, "route": route,
                                          "inputs": replay.total, "who": who})
        self._wake()
        return replay

    async def stop(self, route: str, replay_id: str) -> Replay:
        """Stop a running replay (its jobs already made run to their end)."""
        await self._spec(route)
        replay = await self.replays.stop(replay_id, route)
        log.info("replay_stopped", extra={"replay_id": replay_id, "route": route})
        return replay

    async def resume(self, route: str, replay_id: str) -> Replay:
        """Resume a stopped replay where it stopped: no input it sent is sent again."""
        await self._spec(route)
        replay = await self.replays.resume(replay_id, route)
        log.info("replay_resumed", extra={"replay_id": replay_id, "route": route})
        self._wake()
        return replay

    async def get(self, route: str, replay_id: str) -> Replay:
        """One replay of ``route`` with its progress (``NotFound`` otherwise)."""
        await self._spec(route)
        return await self.replays.get(replay_id, route)

    async def listing(self, route: str) -> list[Replay]:
        """The route's newest replays, newest first."""
        await self._spec(route)
        return await self.replays.listing(route)

    def _wake(self) -> None:
        if self._notifier is not None:
            self._notifier.wake(LoopName.REPLAY)


def baseline_draw(position: int, percent: float) -> bool:
    """Whether the input at ``position`` (0-based, in the replay's order) also goes to
    the control: exactly ``percent`` % of every run of inputs, evenly spread, the same
    after a resume."""
    return math.floor((position + 1) * percent / 100) > math.floor(position * percent / 100)


class Replayer(Loop):
    """The replay loop of one gateway process (see the module docstring).

    Parameters
    ----------
    replays, shadows : ReplayStore, ShadowStore
        The replay rows; the routes' shadow budget use.
    router : Router
        The live specs (budget, policy, providers) and the providers' targets.
    owner : str
        This process's lease owner (:func:`gateway.store.lease.process_owner`).
    lease_s : float
        How long a leased replay stays this process's without a round.
    """

    name = LoopName.REPLAY

    def __init__(self, *, replays: ReplayStore, shadows: ShadowStore, router: Router,
                 notifier: Notifier, owner: str, lease_s: float, interval_s: float,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._replays = replays
        self._shadows = shadows
        self._router = router
        self._owner = owner
        self._lease_s = lease_s
        self._active = False
        self.next_due = self._due

    async def _due(self, now: datetime) -> datetime:
        """Now while this process holds a running replay (its jobs free budget as they
        finish), else :data:`IDLE_S` ahead."""
        return now if self._active else now + timedelta(seconds=IDLE_S)

    async def run_once(self) -> int:
        held = await self._replays.lease(self._owner, self._lease_s)
        self._active = bool(held)
        handled = 0
        for replay in held:
            try:
                handled += await self._advance(replay)
            except Exception as exc:  # noqa: BLE001 (one replay's round fails alone)
                log.warning("replay_round_failed", extra={"replay_id": replay.id,
                                                          "error": str(exc) or type(exc).__name__})
        return handled

    async def _advance(self, replay: Replay) -> int:
        """One step of ``replay``: hand out what fits in the budget, or finish it."""
        try:
            spec = self._router.spec(replay.route)
        except NotFound:  # no longer configured: it waits, stoppable
            return 0
        if replay.sent >= replay.total:
            if await self._replays.finish(replay, self._owner):
                log.info("replay_finished", extra={"replay_id": replay.id,
                                                   "route": replay.route})
                return 1
            return 0
        if spec.candidate is None:  # promoted or removed meanwhile: nothing to send to
            return 0
        budget = spec.shadow_budget
        running, last_hour = await self._shadows.budget_use(replay.route)
        waiting = await self._replays.waiting(replay.route)
        free = min(budget.max_concurrent - running - waiting,
                   budget.max_per_hour - last_hour - waiting)
        if free <= 0:
            return 0
        keys = recorded_routes(self._router, replay.route)
        handed: list[RecordedInput] = []
        made: list[NewJob] = []
        skipped = 0
        for recorded in await self._replays.next_inputs(replay, keys, free):
            jobs = self._jobs_for(replay, spec, recorded, replay.sent + len(handed))
            if len(made) + len(jobs) > free and (handed or running + waiting):
                break  # waits for room; alone, an input whose two jobs never fit goes
                # (a budget of 1: the gate puts its second job back until there is room)
            handed.append(recorded)
            made += jobs
            skipped += not jobs
        if not await self._replays.hand_out(replay, self._owner, handed, made, skipped):
            return 0  # stopped meanwhile, or another process took the lease
        if made:
            self._notifier.wake(LoopName.DISPATCHER)
            self._notifier.due(LoopName.REAPER, self._clock.now() + timedelta(
                seconds=budget.max_wait_s))
        return len(handed)

    def _jobs_for(self, replay: Replay, spec: RouteSpec, recorded: RecordedInput,
                  position: int) -> list[NewJob]:
        """The shadow jobs of one recorded input: none when the policy refuses it."""
        if spec.shadow_policy is None or spec.shadow_policy.refusal(recorded.input):
            return []
        assert spec.candidate is not None  # as _advance checked
        arms = [("shadow", spec.candidate)]
        if baseline_draw(position, replay.baseline_percent):
            arms.append(("baseline", spec.provider))
        return [
            NewJob(
                id=ids.new_prediction_id(), model=recorded.model, version=recorded.version,
                deployment=recorded.deployment, route=replay.route, provider=provider,
                target=self._router.target(replay.route, provider),
                input={},  # by reference: the recorded prediction's (ShadowGate.split)
                callback_token=ids.callback_token(), priority=SHADOW_PRIORITY, arm=arm,
                shadow_of=recorded.id, tenant=recorded.tenant, replay_id=replay.id,
            )
            for arm, provider in arms
        ]
