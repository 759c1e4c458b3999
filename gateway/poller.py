"""The poller: asks providers where submitted jobs stand when no webhook has said so.

Jobs are due at ``next_attempt_at``; each round leases the due ones, calls
``adapter.fetch`` (a status call, or Cog's watchdog probe, docs/cog.md §2) and
hands a terminal snapshot to the finalizer. Between checks the interval grows with the
job's age (half its time since submission, between the adapter's ``fetch_interval_s`` and
``fetch_max_interval_s``) with full jitter, so a long job is not hammered and a lost
webhook is still noticed. Jobs whose provider cannot be asked are only rescheduled.

With thousands of jobs in flight the poller works in groups, not job by job: a round
takes every job due within :data:`EARLY_S` (or a quarter of the shortest poll interval:
a job is checked at most that much early, well inside its jitter), a poll that learnt
nothing writes nothing of the job, and the round hands all its jobs back in one write
(``release_many``); idle, the loop sleeps until the next job falls due
(:mod:`gateway.store.due`). So a poll costs the provider call and a share of two writes
per round (docs/benchmarks.md, bench/inflight.py).
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta

from contracts.errors import (
    CapabilityMissing,
    CutoverError,
    OutcomeUnreadable,
    UpstreamRetryable,
)
from contracts.job import Job
from contracts.snapshot import ProviderSnapshot
from gateway import boundary
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.finalizer import Finalizer
from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.providers import Provider, provider_ref
from gateway.store.jobs import JobStore
from gateway.store.ordering import moves_back, progress_values

__all__ = ["Poller"]

log = logging.getLogger(__name__)
MAX_RETRY_AFTER_S = 300.0  # a longer Retry-After is read as this; the deadline still applies
EARLY_S = 1.0  # a round also takes the jobs due within this many seconds (at most)


class Poller(Loop):
    """Fetches due jobs' status; see the module docstring."""

    name = LoopName.POLLER

    def __init__(
        self,
        *,
        store: JobStore,
        providers: dict[str, Provider],
        finalizer: Finalizer,
        notifier: Notifier,
        interval_s: float,
        batch: int = 128,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._store = store
        self._providers = providers
        self._finalizer = finalizer
        self._batch = batch
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not security)
        self._releases: dict[str, datetime | None] = {}

    async def run_once(self) -> int:
        intervals = [p.adapter.capabilities.fetch_interval_s for p in self._providers.values()]
        early_s = min([EARLY_S, *(i / 4 for i in intervals)])
        jobs = await self._store.claim_fetch(self._batch, early_s)
        releases: dict[str, datetime | None] = {}
        self._releases = releases
        try:
            await boundary.each(jobs, self._check, self._failed)
        finally:  # a failed write leaves the leases to expire: the jobs are polled again
            await self._store.release_many(releases)
        return len(jobs)

    def _release(self, job: Job, next_attempt_at: datetime | None) -> None:
        """Hand ``job`` back, due at ``next_attempt_at``, with the round's other jobs."""
        self._releases[job.id] = next_attempt_at

    async def _failed(self, job: Job, exc: BaseException, verdict: boundary.Verdict) -> None:
        """One job's check raised (:mod:`gateway.boundary`): release it with a backoff
        (retryable) or at its usual interval (permanent); its siblings are unaffected."""
        provider = self._providers.get(job.provider)
        context = {"job_id": job.id, "provider": job.provider, "error": boundary.describe(exc)}
        log.warning("fetch_item_failed", extra={**context, "verdict": verdict.value})
        due = self._next(job, provider)
        if verdict is boundary.Verdict.RETRY:
            due = self._clock.now() + timedelta(seconds=self._rng.uniform(0, self._interval_s * 4))
        await self._store.release(job.id, next_attempt_at=due)

    async def _check(self, job: Job) -> None:
        provider = self._providers.get(job.provider)
        if provider is None:
            self._release(job, self._next(job, None))
            return
        if not provider.adapter.capabilities.fetch:  # cannot be polled: wait for its webhook
            self._release(job, None)
            return
        snapshot = await self._fetch(job, provider)
        if snapshot is None:
            return
        if snapshot.provider_job_id != job.provider_job_id:
            log.warning("fetch_for_another_job", extra={"job_id": job.id, "provider": job.provider})
            self._release(job, self._next(job, provider))
            return
        if snapshot.lost and not await self._lost_for_good(job, provider, snapshot):
            return
        if not snapshot.lost and job.lost_at is not None:  # found after all: not lost
            await self._store.mark_found(job.id)
        if snapshot.state.terminal:
            await self._finish(job, provider, snapshot)
            return
        progress = self._finalizer.progress(job, snapshot)
        if not moves_back(job, progress) and progress_values(job, progress, self._clock.now()):
            updated = await self._store.apply_progress(job.id, progress)  # news: written
            if updated is not None:
                self._notifier.job_changed(job.id, updated)
        self._release(job, self._next(job, provider))

    async def _fetch(self, job: Job, provider: Provider) -> ProviderSnapshot | None:
        """The provider's snapshot of ``job``; None when the fetch failed (the job is
        then released at its next due time)."""
        try:
            return await provider.adapter.fetch(provider_ref(job))
        except CapabilityMissing:
            self._release(job, None)
        except OutcomeUnreadable as exc:  # finished, but its result did not read
            await self._unreadable(job, provider, exc)
        except UpstreamRetryable as exc:  # 429, 5xx, rate limit: Retry-After honoured
            log.warning("fetch_failed", extra={"job_id": job.id, "error": exc.detail})
            self._release(job, self._next(job, provider, exc.retry_after_s))
        except CutoverError as exc:
            log.warning("fetch_failed", extra={"job_id": job.id, "error": exc.detail})
            self._release(job, self._next(job, provider))
        return None

    async def _finish(self, job: Job, provider: Provider, snapshot: ProviderSnapshot) -> None:
        """Apply a terminal snapshot under the job's apply lease (:meth:`JobStore.applying`,
        renewed while its outputs are copied; the job's provider events wait for it),
        unless provider events for the job wait to be applied: one of them is being
        applied, or will be, and says the same (a second copy of the outputs avoided);
        the job is checked again later, in case they do not finish it."""
        async with self._store.applying(job.id) as held:
            if held:
                await self._finalizer.finalize(job, snapshot)
                return
        self._release(job, self._next(job, provider))

    async def _unreadable(self, job: Job, provider: Provider, exc: OutcomeUnreadable) -> None:
        """The provider finished the job but its outcome did not read: read it again,
        with a backoff that grows with the time since the first failed read (persisted
        as the job's ``lost_at``) and honours ``Retry-After``, until ``exc.window_s`` has
        passed; then record ``exc.final`` (docs/providers.md, "fal")."""
        first = job.lost_at or await self._store.mark_lost(job.id)
        now = self._clock.now()
        until = first + timedelta(seconds=exc.window_s)
        if now >= until:
            log.warning("outcome_unreadable_final", extra={
                "job_id": job.id, "provider": job.provider, "error": exc.detail})
            await self._finish(job, provider, exc.final)
            return
        caps = provider.adapter.capabilities
        waited = (now - first).total_seconds()
        delay = min(caps.fetch_max_interval_s, max(caps.fetch_interval_s, waited))
        delay *= self._rng.uniform(0.5, 1.0)
        if exc.retry_after_s is not None:
            delay = max(delay, min(exc.retry_after_s, MAX_RETRY_AFTER_S))
        log.info("outcome_reread", extra={
            "job_id": job.id, "provider": job.provider, "error": exc.detail, "delay_s": delay})
        self._release(job, min(until, now + timedelta(seconds=delay)))

    async def _lost_for_good(
        self, job: Job, provider: Provider, snapshot: ProviderSnapshot
    ) -> bool:
        """Whether a job the provider no longer knows may be failed now.

        Not while provider events for it wait to be applied (it finished; they say how),
        nor within the provider's terminal-webhook retry window from the first time it
        was found missing (``Capabilities.lost_grace_s``); the job is checked again later.
        Meanwhile it holds none of the provider's slots: the provider is not running it.
        """
        if await self._store.has_unprocessed_events(job.id):
            self._release(job, self._next(job, provider))
            return False
        if snapshot.provider_restarted:
            return True  # its webhooks died with it: nothing can still arrive
        lost_at = job.lost_at or await self._store.mark_lost(job.id)
        until = lost_at + timedelta(seconds=provider.adapter.capabilities.lost_grace_s)
        now = self._clock.now()
        if now >= until:
            return True
        self._release(job, min(until, self._next(job, provider)))
        return False

    def _next(
        self, job: Job, provider: Provider | None, retry_after_s: float | None = None
    ) -> datetime:
        now = self._clock.now()
        if provider is None:
            return now + timedelta(seconds=60)
        caps = provider.adapter.capabilities
        age = (now - (job.submitted_at or job.created_at)).total_seconds()
        ceiling = min(caps.fetch_max_interval_s, max(caps.fetch_interval_s, age / 2))
        delay = caps.fetch_interval_s / 2 + self._rng.uniform(0, ceiling)
        if retry_after_s is not None:  # the provider's own wait wins, within reason
            delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
        return now + timedelta(seconds=delay)
