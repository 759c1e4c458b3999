"""Cancels and deadlines: every job ends, within its deadline (docs/architecture.md,
invariants 2 and 6).

Each round:

1. unsubmitted jobs with a cancel request end ``canceled`` at once (never submitted);
   unsubmitted jobs past their ``Cancel-After`` deadline end ``canceled`` with an error
   naming the deadline (Replicate would say ``aborted``, which 1.x clients cannot read:
   docs/replicate-api.md §4.3);
2. submitted jobs with a cancel request, or past their deadline, get a provider cancel,
   sent again every ``cancel_resend_s`` until a terminal event arrives (Cog may answer 200
   to a cancel and still miss it: docs/cog.md §1.7); the provider's terminal event
   decides the outcome. The cancel is claimed (marked sent) before it is sent, so several
   gateway processes send one;
3. jobs still active ``cancel_grace_s`` after the cancel request (or the deadline, or
   their submit if that came later: the provider is told first) end ``canceled``; jobs
   older than ``max_job_lifetime_s`` (without a deadline of their own) are canceled
   upstream and end ``failed``;
4. shadows still waiting for their provider (at capacity) longer than their route's
   ``shadow_budget.max_wait_s`` are dropped (``canceled``, never compared: docs/shadow.md).

An idle reaper sleeps until the first of these falls due (:func:`next_work`), and a create
with a deadline or a shadow tells it when that one does. A cancel that a round did not take
(its row locked by a poll's claim at that moment) is due at once, not at its grace
(:meth:`gateway.store.due.Due.reap`).

Every job is one item (:func:`gateway.boundary.each`): one that fails waits for the next
round and never stops the others' cancels and deadlines.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from contracts.errors import CutoverError
from contracts.job import Job, JobState
from contracts.snapshot import ProviderSnapshot
from gateway import boundary
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.finalizer import ASKS_BEFORE_GIVING_UP, Finalizer, why_never_started
from gateway.loop import Loop, NextDue
from gateway.notify import LoopName, Notifier
from gateway.providers import Provider, provider_ref
from gateway.rollout.shadowgate import WAITED, ShadowGate
from gateway.store.jobs import JobStore
from gateway.wire import timestamp

__all__ = ["Reaper", "next_work"]

log = logging.getLogger(__name__)


def next_work(reap: NextDue, shadow_gate: ShadowGate | None) -> NextDue:
    """The reaper's next-work time: the store's (``reap``: deadlines, lifetimes, cancel
    graces and resends; gateway/store/due.py) or the first shadow drop, whichever comes
    first. Without the shadows' it slept past them by up to ``loop_max_idle_s``."""
    if shadow_gate is None:
        return reap

    async def earliest(now: datetime) -> datetime | None:
        times = (await reap(now), await shadow_gate.next_drop_at(now))
        return min((t for t in times if t is not None), default=None)

    return earliest


class Reaper(Loop):
    """Applies cancels, deadlines and the maximum lifetime."""

    name = LoopName.REAPER

    def __init__(
        self,
        *,
        store: JobStore,
        providers: dict[str, Provider],
        finalizer: Finalizer,
        notifier: Notifier,
        cancel_grace_s: float,
        max_job_lifetime_s: float,
        cancel_resend_s: float,
        interval_s: float,
        batch: int = 64,
        clock: Clock = SYSTEM_CLOCK,
        shadow_gate: ShadowGate | None = None,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._store = store
        self._providers = providers
        self._finalizer = finalizer
        self._grace = timedelta(seconds=cancel_grace_s)
        self._resend = timedelta(seconds=cancel_resend_s)
        self._lifetime = timedelta(seconds=max_job_lifetime_s)
        self._batch = batch
        self._shadow_gate = shadow_gate
        # Job id -> (failed asks, when the last one was made): in this process only, so
        # a restart asks more often, never less.
        self._asks: dict[str, tuple[int, datetime]] = {}

    async def run_once(self) -> int:
        unsubmitted = await self._store.unsubmitted_to_cancel(self._batch)
        await boundary.each(unsubmitted, self._end_unsubmitted, self._failed)
        now = self._clock.now()
        cancels = await self._store.claim_cancels(now - self._resend, self._batch)
        await boundary.each(cancels, self._cancel_requested, self._failed)
        overdue = await self._store.overdue(
            cancel_before=now - self._grace,
            created_before=now - self._lifetime,
            limit=self._batch,
        )
        self._asks = {k: v for k, v in self._asks.items() if k in {j.id for j in overdue}}
        due = [job for job in overdue if self._may_ask(job, now)]
        await boundary.each(due, self._expire, self._failed)
        waited = []
        if self._shadow_gate is not None:
            waited = await self._shadow_gate.waited_too_long(now, self._batch)
            await boundary.each(waited, self._drop_shadow, self._failed)
        return len(unsubmitted) + len(cancels) + len(due) + len(waited)

    async def _drop_shadow(self, job: Job) -> None:
        await self._finalizer.finish_here(job, JobState.CANCELED, WAITED)

    def _may_ask(self, job: Job, now: datetime) -> bool:
        """Not again within ``cancel_resend_s`` of a failed ask of the provider."""
        asked = self._asks.get(job.id)
        return asked is None or now - asked[1] >= self._resend

    async def _failed(self, job: Job, exc: BaseException, verdict: boundary.Verdict) -> None:
        """One job's cancel or deadline raised: it is tried again next round (a cancel
        after ``cancel_resend_s``); every other job goes on."""
        log.warning(
            "reaper_item_failed",
            extra={"job_id": job.id, "error": boundary.describe(exc), "verdict": verdict.value},
        )

    async def _end_unsubmitted(self, job: Job) -> None:
        await self._finalizer.finish_here(job, JobState.CANCELED, why_never_started(job))

    async def _send_cancel(self, job: Job) -> bool:
        """Ask the provider to cancel ``job``; True when it accepted."""
        provider = self._providers.get(job.provider)
        if (
            provider is not None
            and job.provider_job_id is not None
            and provider.adapter.capabilities.cancel
        ):
            try:
                return await provider.adapter.cancel(provider_ref(job))
            except CutoverError as exc:
                log.warning("cancel_failed", extra={"job_id": job.id, "error": exc.detail})
        return False

    async def _cancel_requested(self, job: Job) -> None:
        """Send a requested (or deadline) cancel. Where an accepted cancel is the job's
        terminal state at the provider (``Capabilities.cancel_is_final``: RunPod's
        ``CANCELLED``), the prediction ends ``canceled`` now. No apply lease is taken (a
        poll may hold the job this very moment): a canceled outcome copies nothing, and
        the guarded write lets the first terminal state stand, as a cancel grace's does."""
        if not await self._send_cancel(job):
            return
        provider = self._providers[job.provider]
        if not provider.adapter.capabilities.cancel_is_final or job.provider_job_id is None:
            return
        why = None if job.cancel_requested_at is not None else (
            f"the prediction passed its deadline ({timestamp(job.deadline)})"
            if job.deadline is not None else None
        )
        snapshot = ProviderSnapshot(provider_job_id=job.provider_job_id,
                                    state=JobState.CANCELED, raw_status="CANCELLED", error=why)
        await self._finalizer.finalize(await self._store.get(job.id), snapshot)

    async def _cancel_upstream(self, job: Job) -> None:
        await self._send_cancel(job)
        await self._store.mark_cancel_sent(job.id)

    async def _expire(self, job: Job) -> None:
        if await self._settled_by_provider(job):
            return
        now = self._clock.now()
        if job.cancel_requested_at is not None:
            await self._finalizer.finish_here(job, JobState.CANCELED, None)
            return
        if job.deadline is not None and job.deadline <= now:
            why = f"the prediction passed its deadline ({timestamp(job.deadline)})"
            await self._finalizer.finish_here(job, JobState.CANCELED, why)
            return
        lifetime = f"{self._lifetime.total_seconds():.0f} s"
        if job.submitted_at is None:
            why = job.raw_status or "not tried"
            error = f"provider {job.provider!r} did not accept the prediction within {lifetime}"
            await self._finalizer.finish_here(job, JobState.FAILED, f"{error} (last: {why})")
            return
        await self._cancel_upstream(job)
        await self._finalizer.finish_here(
            job, JobState.FAILED, f"the prediction did not finish within {lifetime}"
        )


    async def _settled_by_provider(self, job: Job) -> bool:
        """Ask the provider once more before the gateway ends a job itself.

        The chaos run found predictions ended ``canceled`` here whose provider had
        already finished them ``succeeded`` (their webhooks lost, the polls failing): the
        provider's terminal answer wins, so a job it reports finished is finalized with
        that answer, under an apply lease, or left to the loop or the provider events
        applying a result already. True when that happened, or when the provider could
        not be asked: the job is then tried again (``cancel_resend_s`` later) until three
        times the grace period has passed and at least :data:`ASKS_BEFORE_GIVING_UP` asks
        failed (the time alone may have passed while the gateway was down:
        docs/reliability.md, "What the runs found")."""
        provider = self._providers.get(job.provider)
        if (
            provider is None
            or job.provider_job_id is None
            or not provider.adapter.capabilities.fetch
        ):
            return False
        try:
            snapshot = await provider.adapter.fetch(provider_ref(job))
        except CutoverError as exc:
            log.warning("expire_fetch_failed", extra={"job_id": job.id, "error": exc.detail})
            now = self._clock.now()
            failed = self._asks.get(job.id, (0, now))[0] + 1
            self._asks[job.id] = (failed, now)
            since = job.cancel_requested_at or job.deadline or job.created_at
            return failed < ASKS_BEFORE_GIVING_UP or now - since < 3 * self._grace
        if snapshot.lost or not snapshot.state.terminal:
            return False
        if snapshot.provider_job_id != job.provider_job_id:
            return False
        # Under an apply lease, as a poll's (docs/lifecycle.md, "Leases during an apply"):
        # not held, another loop or the job's events apply a result; the next round sees.
        async with self._store.applying(job.id, claimed=False) as held:
            if held:
                await self._finalizer.finalize(job, snapshot)
        return True
