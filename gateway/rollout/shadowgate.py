"""The shadow budget at dispatch: a shadow over its route's budget is dropped, not queued.

A shadow is written with its primary at create time at no cost but one insert; whether
it may run is decided here, when the dispatcher claims it (docs/shadow.md, "Budget"): at
most ``shadow_budget.max_concurrent`` of a route's shadows running at once, and at most
``max_per_hour`` started in any hour. Shadows claimed in one round are admitted one by
one, each counting those admitted before it. Gateway processes share the counts through
the store, so several processes may briefly overshoot by the shadows they admit in the
same instant. A replay's shadow (``replay_id``, docs/cutover-day.md) over the budget is
not dropped but put back, due again after :data:`REPLAY_RETRY_S`: its replay keeps no
more of them waiting than the budget has room for, so this happens only when live
shadows took the room in the same instant. A shadow that a provider at capacity keeps
waiting longer than ``max_wait_s`` is dropped by the reaper
(:meth:`ShadowGate.waited_too_long`) when that wait runs out: the reaper sleeps until
then (:meth:`ShadowGate.next_drop_at`), and a create tells it of a new shadow's
(:func:`drop_at`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from contracts.errors import NotFound
from contracts.job import Job, JobState
from gateway import ids
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.metrics import Metrics
from gateway.rollout import canary
from gateway.rollout.router import Routed, Router, target_of
from gateway.rollout.spec import HIDDEN_ARMS
from gateway.store.records import NewJob
from gateway.store.shadows import ShadowStore

__all__ = [
    "DROPPED", "REPLAY_RETRY_S", "SHADOW_PRIORITY", "SKIPPED", "SKIP_REASONS", "WAITED",
    "ShadowGate", "drop_at", "shadow_job", "skip_of", "skip_reason",
]

log = logging.getLogger(__name__)
DROPPED = "shadow dropped: the route's shadow budget is spent"
WAITED = "shadow dropped: it waited longer than shadow_budget.max_wait_s for its provider"
SKIPPED = "shadow skipped by the route's shadow_policy: "  # + the policy's reason
SKIP_REASONS = ("policy_size", "policy_field", "budget", "queue_full", "provider_refused")
#: Below every route's priority (-100..100): at a provider at capacity, a hidden copy
#: waits until no prediction of any app is waiting (docs/limits.md, "Fair queueing").
SHADOW_PRIORITY = -101
REPLAY_RETRY_S = 1.0  # a replay's shadow over the budget is due again after this
PutBack = Callable[..., Awaitable[None]]
"""``put_back(job_id, next_attempt_at=when)``: a claimed job given back, due at ``when``."""


class ShadowGate:
    """Admits or drops the shadows of one dispatcher round."""

    def __init__(
        self, *, shadows: ShadowStore, router: Router, metrics: Metrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._shadows = shadows
        self._router = router
        self._metrics = metrics
        self._clock = clock

    async def split(self, claimed: list[Job], put_back: PutBack | None = None
                    ) -> tuple[list[Job], list[Job]]:
        """``(to submit, to drop)`` of one round's claimed jobs; primaries always pass. A
        replay's shadow over the budget is neither: it is given back through
        ``put_back(job_id, next_attempt_at=...)`` (the dispatcher's lease release), due
        again after :data:`REPLAY_RETRY_S` (module docstring)."""
        admitted: Counter[str] = Counter()
        keep: list[Job] = []
        drop: list[Job] = []
        for job in claimed:
            if job.arm not in HIDDEN_ARMS:
                keep.append(job)
            elif await self._fits(job, admitted[job.route]):
                admitted[job.route] += 1
                keep.append(await self._with_input(job))
            elif job.replay_id is None or put_back is None:
                drop.append(job)
            else:
                again = self._clock.now() + timedelta(seconds=REPLAY_RETRY_S)
                await put_back(job.id, next_attempt_at=again)
        return keep, drop

    def refused(self, job: Job) -> None:
        """Count a hidden copy its provider refused at create (a 4xx, or a request the
        adapter cannot build, e.g. no target): a ``provider_refused`` skip."""
        if job.arm in HIDDEN_ARMS and self._metrics is not None:
            self._metrics.shadow_skips.labels(job.route, "provider_refused").inc()

    async def _with_input(self, job: Job) -> Job:
        """``job`` with its primary's input: a shadow row stores none of its own
        (:func:`shadow_job`); the dispatcher then prepares it for the shadow's provider
        exactly as for a live prediction there (maps, then large files staged)."""
        if job.input or job.shadow_of is None:  # a row written before inputs by reference
            return job
        primary = await self._shadows.primary_input(job.shadow_of)
        return job if primary is None else job.model_copy(update={"input": primary})

    async def waited_too_long(self, now: datetime, limit: int) -> list[Job]:
        """Shadows still waiting for their provider (at capacity) longer than their
        route's ``shadow_budget.max_wait_s`` (a route no longer configured: any), to be
        dropped: they would otherwise wait until ``max_job_lifetime_s``. Counted as
        dropped; a dropped shadow makes no pair, so the guard never sees it.

        Asked route by route, each with its own wait: the oldest shadows of all routes
        together could be a batch of a longer-waiting route's, hiding a late one of
        another route from every round (while :meth:`next_drop_at` kept the reaper
        looking)."""
        late: list[Job] = []
        for route, oldest in sorted((await self._shadows.oldest_waiting()).items()):
            cutoff = now - timedelta(seconds=self._max_wait_s(route))
            if oldest > cutoff or len(late) >= limit:
                continue
            late += await self._shadows.waiting(route, cutoff, limit - len(late))
        for job in late:
            if self._metrics is not None:
                self._metrics.shadows.labels(job.route, "dropped").inc()
                self._metrics.shadow_skips.labels(job.route, "queue_full").inc()
            log.info("shadow_dropped", extra={"job_id": job.id, "route": job.route,
                                              "waited_s": (now - job.created_at).total_seconds()})
        return late

    async def next_drop_at(self, now: datetime) -> datetime | None:
        """When the first shadow waiting at the gateway reaches its route's ``max_wait_s``
        (``now`` for a route no longer configured); None when none waits."""
        del now  # every candidate is a stored time
        times = [oldest + timedelta(seconds=self._max_wait_s(route))
                 for route, oldest in (await self._shadows.oldest_waiting()).items()]
        return min(times, default=None)

    def _max_wait_s(self, route: str) -> float:
        """``route``'s ``shadow_budget.max_wait_s``; 0 for a route no longer configured."""
        try:
            return self._router.spec(route).shadow_budget.max_wait_s
        except NotFound:
            return 0.0

    async def _fits(self, job: Job, admitted: int) -> bool:
        try:
            budget = self._router.spec(job.route).shadow_budget
        except NotFound:  # a route no longer configured: nothing to compare against
            return False
        running, last_hour = await self._shadows.budget_use(job.route)
        fits = (
            running + admitted < budget.max_concurrent
            and last_hour + admitted < budget.max_per_hour
        )
        if not fits and job.replay_id is not None:  # put back, not dropped (split)
            return False
        outcome = "submitted" if fits else "dropped"
        if self._metrics is not None:
            self._metrics.shadows.labels(job.route, outcome).inc()
            if not fits:
                self._metrics.shadow_skips.labels(job.route, "budget").inc()
        if not fits:
            log.info(
                "shadow_dropped",
                extra={"job_id": job.id, "route": job.route, "running": running,
                       "last_hour": last_hour},
            )
        return fits


def drop_at(routed: Routed, shadow: NewJob) -> datetime:
    """When ``shadow``, still waiting at the gateway, is dropped: its route's
    ``shadow_budget.max_wait_s`` after its creation."""
    assert routed.spec is not None and shadow.created_at is not None  # as shadow_job makes it
    return shadow.created_at + timedelta(seconds=routed.spec.shadow_budget.max_wait_s)


def shadow_job(routed: Routed, new: NewJob) -> NewJob | None:
    """The hidden copy of ``new`` when the route draws one (on the candidate, or on the
    control again for the baseline): no webhook, no idempotency key, its own callback
    token, and :data:`SHADOW_PRIORITY`, so it never takes a provider's slot from a
    waiting prediction of an app (docs/shadow.md). Its input is the primary's, by
    reference (``shadow_of``): the row stores ``{}`` and the dispatcher reads the primary's
    input when it submits the shadow, so a 3 MB ``data:`` image is stored once. A drawn
    primary whose input the policy refuses gets a skip instead: a row born canceled with
    ``SKIPPED`` and the reason (counted by the report, "Skips"). Its ``target`` is the one a
    live prediction on that provider gets (:func:`~gateway.rollout.router.target_of`)."""
    spec = routed.spec
    if spec is None or spec.candidate is None:
        return None
    arm, refusal = canary.shadow_draw(routed.key, spec, routed.arm, new.id, new.input)
    if arm is None:
        return None
    provider = spec.candidate if arm == "shadow" else spec.provider
    return NewJob(
        id=ids.new_prediction_id(),
        model=new.model,
        version=new.version,
        deployment=new.deployment,
        route=new.route,
        provider=provider,
        target=target_of(routed.route, provider),  # as a live prediction there is sent
        input={},  # by reference: the primary's row holds the one copy (ShadowGate.split)
        logs=None if refusal else new.logs,
        callback_token=ids.callback_token(),
        deadline=new.deadline,
        created_at=new.created_at,
        priority=SHADOW_PRIORITY,
        arm=arm,
        shadow_of=new.id,
        tenant=new.tenant,
        skipped=SKIPPED + refusal if refusal else None,
    )


def skip_of(state: JobState, error: str | None) -> str | None:
    """The :data:`SKIP_REASONS` label of a shadow that ended without reaching its
    provider, or None when that is no skip: canceled with its primary (the app's cancel)
    or past its deadline before it was sent. Those were counted ``provider_refused``."""
    if error is not None and (error in (DROPPED, WAITED) or error.startswith(SKIPPED)):
        return skip_reason(error)
    return "provider_refused" if state is JobState.FAILED else None


def skip_reason(error: str | None) -> str:
    """The :data:`SKIP_REASONS` label of a shadow that never reached its provider, from
    its stored error: the policy's (size or field), the budget's, the wait's, else the
    provider refused it (its submit failed)."""
    if error is not None and error.startswith(SKIPPED):
        return "policy_size" if "larger than" in error else "policy_field"
    return {DROPPED: "budget", WAITED: "queue_full"}.get(error or "", "provider_refused")

