"""The canary guard loop: rolls a breaching canary back to 0 by itself (docs/canary.md).

Every ``interval_s`` (5 s by default) and for every route, it reads the control and
candidate predictions finished within the guard's window (and after the route's last
change) and the candidate's stuck ones (not taken ``max_queue_s`` after their create),
publishes their counts, error rates, p95 latency and the stuck count as gauges, and —
when the route has a guard, not paused (``cutover routes pause-guard``), and its canary
is above 0 — judges them
(:func:`gateway.rollout.guard.evaluate`, plus the shadow contract-break rate from
``pair_stats``). A breach sets the canary to 0
in one guarded, audited change (who ``guard``, the reason, the samples), logs
``canary_rolled_back`` and counts it in ``cutover_guard_rollbacks_total``. Several
processes may judge at once: the change only applies while the canary is above 0, so
one rollback is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.rollout import guard
from gateway.rollout.router import Router
from gateway.rollout.spec import RouteSpec
from gateway.store.routes import RouteBook

__all__ = ["DEFAULT_WINDOW_S", "Guard", "PairStatsSource", "arm_stats", "stuck_span"]

log = logging.getLogger(__name__)
DEFAULT_WINDOW_S = 300.0
PairStatsSource = Callable[[str, RouteSpec, datetime], Awaitable[guard.PairStats]]


async def arm_stats(
    book: RouteBook, key: str, since: datetime, stuck: tuple[datetime, datetime] | None = None
) -> tuple[guard.ArmStats, guard.ArmStats]:
    """``(control, candidate)`` stats of route ``key`` since ``since``; with ``stuck``
    (:func:`stuck_span`), the candidate's stuck predictions count as failed."""
    samples = await book.samples(key, since)
    stuck_count = 0 if stuck is None else await book.stuck(key, *stuck)
    control = guard.summarize(s for s in samples if s.arm == "control")
    candidate = guard.summarize((s for s in samples if s.arm == "candidate"), stuck_count)
    return control, candidate


async def stuck_span(
    book: RouteBook, key: str, spec: RouteSpec, now: datetime
) -> tuple[datetime, datetime] | None:
    """When a candidate-arm prediction not taken yet counts as stuck: created after the
    route's last change and at least the guard's ``max_queue_s`` ago, whatever the
    window (docs/canary.md, "A candidate that never takes the work"); None without a
    guard or a candidate."""
    if spec.guard is None or not spec.candidate:
        return None
    return await last_change(book, key, now), now - timedelta(seconds=spec.guard.max_queue_s)


async def last_change(book: RouteBook, key: str, now: datetime) -> datetime:
    """When route ``key`` last changed (its newest audit entry), or the earliest time."""
    entries = await book.history(key, limit=1)
    return entries[0].at if entries else datetime.min.replace(tzinfo=now.tzinfo)


class Guard(Loop):
    """Judges every route's canary (see the module docstring)."""

    name = LoopName.GUARD

    def __init__(
        self,
        *,
        book: RouteBook,
        router: Router,
        notifier: Notifier,
        interval_s: float,
        metrics: Metrics | None = None,
        pair_stats: PairStatsSource | None = None,
        refresh: Callable[[], Awaitable[None]] | None = None,
        reload: Callable[[], Awaitable[object]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._book = book
        self._router = router
        self._metrics = metrics
        self._pair_stats = pair_stats
        self._refresh = refresh
        self._reload = reload

    async def run_once(self) -> int:
        """Judge every route once; the number of rollbacks made comes back (usually 0)."""
        rolled = 0
        if self._refresh is not None:
            await self._refresh()
        for key in self._router.keys:
            rolled += await self._judge(key, self._router.spec(key))
        return rolled

    async def _judge(self, key: str, spec: RouteSpec) -> int:
        window_s = spec.guard.window_s if spec.guard else DEFAULT_WINDOW_S
        now = self._clock.now()
        since = max(now - timedelta(seconds=window_s), await last_change(self._book, key, now))
        stuck = await stuck_span(self._book, key, spec, now)
        control, candidate = await arm_stats(self._book, key, since, stuck)
        self._publish(key, spec, control, candidate)
        if (spec.guard is None or spec.guard_paused or spec.canary_percent <= 0
                or not spec.candidate):
            return 0  # paused: counted and published above, never acted on
        pairs = None
        if self._pair_stats is not None and spec.guard.max_contract_break_rate is not None:
            pairs = await self._pair_stats(key, spec, since)
        breach = guard.evaluate(spec.guard, control, candidate, pairs)
        if breach is None:
            return 0
        return await self._roll_back(key, spec, breach)

    async def _roll_back(self, key: str, spec: RouteSpec, breach: guard.Breach) -> int:
        entry = await self._book.change(
            key,
            who="guard",
            action="rollback",
            reason=breach.reason,  # who is already "guard"
            update={"canary_percent": 0.0},
            evidence=breach.evidence,
            only_if=lambda current: current.canary_percent > 0 and not current.guard_paused,
        )
        if entry is None:
            return 0
        log.warning(
            "canary_rolled_back",
            extra={
                "route": key,
                "provider": spec.candidate,
                "canary_percent": spec.canary_percent,
                "reason": breach.reason,
            },
        )
        if self._metrics is not None:
            self._metrics.guard_rollbacks.labels(key).inc()
        if self._reload is not None:  # live in this process at once
            await self._reload()
        return 1

    def _publish(
        self, key: str, spec: RouteSpec, control: guard.ArmStats, candidate: guard.ArmStats
    ) -> None:
        if self._metrics is None:
            return
        # every route, every round: 0 without a guard or candidate and once the count
        # restarts at a change (a rollback), so an alert on it clears (docs/canary.md)
        self._metrics.guard_stuck.labels(key).set(candidate.stuck)
        arms = [("control", spec.provider, control)]
        if spec.candidate:
            arms.append(("candidate", spec.candidate, candidate))
        for arm, provider, stats in arms:
            labels = (key, arm, provider)
            self._metrics.route_window_predictions.labels(*labels).set(stats.count)
            if stats.error_rate is not None:
                self._metrics.route_error_ratio.labels(*labels).set(stats.error_rate)
            if stats.p95_s is not None:
                self._metrics.route_latency_p95.labels(*labels).set(stats.p95_s)
