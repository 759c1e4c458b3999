"""Provider webhook intake: verify, persist, acknowledge; then apply in order.

A provider calls ``POST /provider-webhooks/{provider}/{job_id}/{token}``. Before the body
is parsed (docs/architecture.md, invariant 5): the job must exist and belong to that provider, the
token must match the job's unguessable callback token (constant-time), and the adapter
must verify the request (a signature, or Cog's bearer token). The raw, verified body is
then stored once (deduplicated on its SHA-256 per job) and acknowledged; if it cannot be
stored, the answer is 503 so the provider retries (docs/cog.md §1.9). The
:class:`EventProcessor` applies stored events in order per job: terminal snapshots go to
the finalizer, others update the job's progress. Events survive a restart unprocessed
and are applied when the gateway returns. On a SQLite file and on PostgreSQL, a body next
in order for its job is applied in the transaction that stores it instead
(:meth:`Intake._applying`, :mod:`gateway.store.applied`, :mod:`gateway.store.pgapplied`;
docs/lifecycle.md, "Order of a job's provider events").
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from adapters import errortext
from contracts.auth import same_secret
from contracts.errors import CutoverError, WebhookVerificationError
from contracts.job import Job
from contracts.snapshot import ProviderSnapshot
from gateway import boundary, retry
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.files.outputs import off_loop
from gateway.finalizer import Finalizer
from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.providers import Provider, provider_ref
from gateway.store.events import INLINE_BYTES, Applying, ProviderEvents
from gateway.store.jobs import JobStore
from gateway.store.ordering import outcome_values, progress_columns
from gateway.store.records import ProviderEvent

__all__ = ["EventProcessor", "Intake"]

log = logging.getLogger(__name__)


class Intake:
    """Receives provider webhooks (see the module docstring)."""

    def __init__(
        self,
        *,
        store: JobStore,
        events: ProviderEvents,
        providers: dict[str, Provider],
        notifier: Notifier,
        clock: Clock = SYSTEM_CLOCK,
        finalizer: Finalizer | None = None,
    ) -> None:
        self._store = store
        self._events = events
        self._providers = providers
        self._notifier = notifier
        self._clock = clock
        self._finalizer = finalizer

    async def authorize(self, provider_name: str, job_id: str, token: str) -> Provider:
        """Check the webhook URL (before the body is even read): the job exists, belongs to
        ``provider_name``, and ``token`` is its callback token (constant-time).

        Raises
        ------
        WebhookVerificationError
            Unknown provider or job, wrong provider, or wrong token.
        """
        provider = self._providers.get(provider_name)
        known = await self._store.callback_token(job_id)
        if (
            provider is None
            or known is None
            or known[0] != provider_name
            or not same_secret(token, known[1])
        ):
            raise WebhookVerificationError("unknown webhook URL")
        return provider

    async def receive(
        self, provider_name: str, job_id: str, token: str, headers: Mapping[str, str], body: bytes
    ) -> bool:
        """Verify and store one webhook; True if it was new, False for a duplicate.

        Raises
        ------
        WebhookVerificationError
            Unknown job, wrong provider, wrong token, or the adapter's check failed.
        ServiceUnavailable
            The event could not be stored (answer 503 so the provider retries).
        """
        provider = await self.authorize(provider_name, job_id, token)
        return await self.accept(provider, job_id, headers, body)

    async def accept(
        self, provider: Provider, job_id: str, headers: Mapping[str, str], body: bytes
    ) -> bool:
        """:meth:`receive` after :meth:`authorize`: the adapter's check, then storage."""
        await provider.adapter.verify_webhook(headers, body)
        return await self.accept_own(provider, job_id, body)

    async def accept_own(self, provider: Provider, job_id: str, body: bytes) -> bool:
        """:meth:`accept` of a body no stranger could have sent: an answer the gateway read
        itself from ``provider`` (a held Cog prediction, docs/cog.md §3). True if new;
        ``ServiceUnavailable`` when it could not be stored."""
        provider_name = provider.name
        if provider.adapter.capabilities.webhook_poke:  # unsigned: only a reason to ask now
            if not await self._store.check_now(job_id):
                await self._late(provider, job_id)
            self._notifier.wake(LoopName.POLLER)
            return True
        # The job's next poll or probe waits: the provider has just spoken about it.
        interval = timedelta(seconds=provider.adapter.capabilities.fetch_interval_s)
        check_after = self._clock.now() + interval
        applying = await self._applying(provider, job_id, body)
        if applying is None:
            if not await self._events.add(job_id, provider_name, body, check_after=check_after):
                return False
            self._notifier.wake(EventProcessor.name)
            return True
        how, applied = applying
        stored = await self._events.add_applied(
            job_id, provider_name, body, how, check_after=check_after
        )
        if not stored.new:
            return False
        if stored.applied:
            applied(stored.job)
        else:
            self._notifier.wake(EventProcessor.name)
        return True

    async def _applying(
        self, provider: Provider, job_id: str, body: bytes
    ) -> tuple[Applying, Callable[[Job | None], None]] | None:
        """How :meth:`EventProcessor._apply` would apply ``body`` (verified), for the store
        to do it in the transaction that stores it (:meth:`ProviderEvents.add_applied`),
        and what follows once it did (given the job as written, or None); None when only
        the processor may: neither a SQLite file nor PostgreSQL, a large body, one that
        does not parse, and, as the job is read there, a job that has a webhook (its
        outbox rows), has no submit recorded, or is another provider job's (a progress
        snapshot of a finished job is late: logged, nothing written). A terminal snapshot's outcome
        (:meth:`_finishing`) is the finalizer's."""
        finalizer = self._finalizer
        if (finalizer is None or len(body) > INLINE_BYTES
                or not self._events.applies_as_stored):
            return None
        try:
            snapshot = provider.adapter.parse_webhook(body)
        except Exception:  # noqa: BLE001 (the processor parses it again and reports it)
            return None
        kept = errortext.kept_body(body)
        if snapshot.state.terminal:
            return await self._finishing(finalizer, job_id, snapshot, kept)
        clock, notifier = self._clock, self._notifier

        def decide(job: Job) -> dict[str, Any] | None:
            if job.state.terminal:  # applied as the processor does: nothing to write
                log.info("late_provider_event", extra={"job_id": job.id,
                                                       "raw": snapshot.raw_status})
                return {}
            if not _appliable(job, snapshot):
                return None
            return progress_columns(job, finalizer.progress(job, snapshot), clock.now())

        def applied(job: Job | None) -> None:
            if job is not None:  # wakes the webhook delivery when the job has a webhook
                notifier.job_changed(job_id, job)

        return Applying(decide, kept), applied

    async def _finishing(
        self, finalizer: Finalizer, job_id: str, snapshot: ProviderSnapshot, kept: bytes
    ) -> tuple[Applying, Callable[[Job | None], None]] | None:
        """A terminal snapshot's outcome (:meth:`Finalizer.outcome`) decided from the job as
        read now, to be recorded in the transaction that stores the webhook while the
        job's row is still the one read; then :meth:`Finalizer.recorded`. None (the
        processor's finalizer) for an outcome that would do network I/O before the
        webhook is answered (fetch files, or ask the provider for the route's schema:
        :meth:`Finalizer.decides_offline`) or write asset rows, or one that raised."""
        found = await self._events.job_row(job_id)
        if found is None:
            return None
        row, job = found
        if not _appliable(job, snapshot) or not finalizer.decides_offline(job, snapshot):
            return None
        try:
            outcome = await finalizer.outcome(job, snapshot)
        except Exception:  # noqa: BLE001 (the processor's finalizer tries it and reports it)
            return None
        if outcome.assets:
            return None
        clock, notifier = self._clock, self._notifier
        error_class = finalizer.error_class(outcome, snapshot)

        def decide(current: Job) -> dict[str, Any] | None:
            return outcome_values(current, outcome, clock.now())

        def applied(done: Job | None) -> None:
            if done is None:
                notifier.job_changed(job_id)
            else:
                finalizer.recorded(job, done, error_class, snapshot)

        return Applying(decide, kept, row=row, job=job), applied

    async def _late(self, provider: Provider, job_id: str) -> None:
        """A poke for a job no longer polled: if it is final, ask the provider once what it
        says now, for the log and the execution time (:meth:`Finalizer.late`); nothing
        of it is applied."""
        job = await self._store.get(job_id)
        if self._finalizer is None or not job.state.terminal or job.provider_job_id is None:
            return
        try:
            snapshot = await provider.adapter.fetch(provider_ref(job))
        except CutoverError as exc:
            log.info("late_poke_fetch_failed", extra={"job_id": job_id, "error": exc.detail})
            return
        if snapshot.state.terminal:
            self._finalizer.late(job, snapshot)


def _appliable(job: Job, snapshot: ProviderSnapshot) -> bool:
    """Whether ``snapshot`` may be applied to ``job`` as its webhook is stored (see
    :meth:`Intake._applying`)."""
    return (job.webhook is None and not job.state.terminal and job.submitted_at is not None
            and (job.provider_job_id is None or snapshot.provider_job_id == job.provider_job_id))


class _Applying(Exception):  # a signal, not an error
    """Another loop holds the event's job under an apply lease until ``retry_at`` (or is
    checked again then): docs/lifecycle.md, "Leases during an apply"."""

    def __init__(self, retry_at: datetime) -> None:
        super().__init__(retry_at)
        self.retry_at = retry_at


class EventProcessor(Loop):
    """Applies stored provider events, oldest first, one job's events in order.

    Each job's events are one item of the round (:func:`gateway.boundary.each`), applied
    while their leases are renewed (:meth:`ProviderEvents.holding`). An event that
    applied is marked processed, by the lease holder only. One that raised a retryable
    error (:class:`gateway.boundary.Verdict`) is released with a backoff, and the job's
    later events wait with it, those of this round and those that arrive or are claimed
    later (docs/lifecycle.md, "Order of a job's provider events"); after
    ``max_attempts`` tries (counted in this process), or at once for a permanent error,
    it is marked processed with its error logged: it never blocks the job's other events
    for longer (docs/lifecycle.md, "Errors"). An event whose job another loop is applying
    a result to (its apply lease, :mod:`gateway.store.applying`) is not applied beside it:
    it is released, the job's later events with it, until that lease ends or a quarter of
    a lease has passed, and then finds the job finished (docs/lifecycle.md, "Leases during
    an apply"); that is no attempt.
    """

    name = LoopName.EVENTS

    def __init__(
        self,
        *,
        store: JobStore,
        events: ProviderEvents,
        providers: dict[str, Provider],
        finalizer: Finalizer,
        notifier: Notifier,
        interval_s: float,
        backoff: retry.Backoff | None = None,
        max_attempts: int = boundary.MAX_ATTEMPTS,
        batch: int = 64,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._store = store
        self._events = events
        self._providers = providers
        self._finalizer = finalizer
        self._backoff = backoff or retry.Backoff(base_s=interval_s, max_s=30.0)
        self._max_attempts = max_attempts
        self._attempts: dict[int, int] = {}
        self._batch = batch
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not security)

    async def run_once(self) -> int:
        events = await self._events.claim(self._batch)
        if not events:
            return 0
        by_job: defaultdict[str, list[ProviderEvent]] = defaultdict(list)
        for event in sorted(events, key=lambda e: e.id):  # a job's in the order stored
            by_job[event.job_id].append(event)
        async with self._events.holding(events):  # leases renewed while the round lasts
            await boundary.each(by_job.values(), self._apply_all, self._unsettled)
        return len(events)

    async def _apply_all(self, events: list[ProviderEvent]) -> None:
        for n, event in enumerate(events):
            try:
                await self._apply(event)
            except asyncio.CancelledError:
                raise
            except _Applying as applying:  # not an attempt: the job's events wait together
                log.info("provider_event_waits_for_apply", extra={"job_id": event.job_id})
                for waiting in events[n:]:
                    await self._events.release(waiting.id, until=applying.retry_at)
                return
            except Exception as exc:  # noqa: BLE001 (one event's boundary: classified here)
                if not await self._failed(event, exc, events[n + 1 :]):
                    return
            self._attempts.pop(event.id, None)
            await self._keep(event)
            await self._events.mark_processed(event.id)

    async def _keep(self, event: ProviderEvent) -> None:
        """Once applied, keep the body bounded and without payloads (docs/providers.md,
        "Error classes"); most bodies are kept as they are, with no write."""
        kept = await off_loop(errortext.kept_body, event.body, size=len(event.body))
        if kept == event.body:
            return
        try:
            await self._events.keep(event.id, kept)
        except Exception as exc:  # noqa: BLE001 (best effort: the event applied all the same)
            log.warning("provider_event_keep_failed",
                        extra={"job_id": event.job_id, "error": boundary.describe(exc)})

    async def _failed(
        self, event: ProviderEvent, exc: Exception, later: list[ProviderEvent]
    ) -> bool:
        """Handle an event that raised; True when it is done with (to be marked)."""
        attempt = self._attempts.get(event.id, 0) + 1
        context = {"job_id": event.job_id, "provider": event.provider,
                   "error": boundary.describe(exc), "attempt": attempt}
        if boundary.verdict(exc) is boundary.Verdict.END or attempt >= self._max_attempts:
            self._attempts.pop(event.id, None)
            log.warning("provider_event_rejected", extra=context)
            return True
        self._attempts[event.id] = attempt
        log.warning("provider_event_retry", extra=context)
        until = self._clock.now() + timedelta(seconds=self._backoff.delay_s(attempt, self._rng))
        for waiting in [event, *later]:  # the job's later events keep their order
            await self._events.release(waiting.id, until=until)
        return False

    async def _unsettled(
        self, events: list[ProviderEvent], exc: BaseException, verdict: boundary.Verdict
    ) -> None:
        # Settling failed (the store is down): the leases run out and the events return.
        log.warning(
            "provider_events_unsettled",
            extra={"job_id": events[0].job_id, "error": boundary.describe(exc)},
        )

    async def _apply(self, event: ProviderEvent) -> None:
        provider = self._providers.get(event.provider)
        if provider is None:
            return
        parse = provider.adapter.parse_webhook
        snapshot = await off_loop(parse, event.body, size=len(event.body))
        job, applied_until = await self._store.get_applied(event.job_id)
        if job.state.terminal:
            log.info("late_provider_event", extra={"job_id": job.id, "raw": snapshot.raw_status})
            return
        if applied_until is not None:  # a poll or a submit is applying the job's result
            raise _Applying(applied_until)
        if job.provider_job_id is not None and snapshot.provider_job_id != job.provider_job_id:
            log.warning(
                "provider_event_for_another_job",
                extra={"job_id": job.id, "provider": job.provider},
            )
            return
        if snapshot.state.terminal:
            await self._finalizer.finalize(job, snapshot)
            return
        progress = self._finalizer.progress(job, snapshot)
        if job.submitted_at is None:
            # The provider has the job, yet its submit was never recorded (the process
            # died mid-submit): the event records it, so polls and cancels reach the job
            # (docs/reliability.md, "What the runs found"). Left unsubmitted but moved on
            # to ``running``, it was in no loop's queue and never ended.
            updated = await self._store.mark_submitted(
                job.id, snapshot.provider_job_id, progress,
                provider.first_check_at(self._clock.now()),
            )
        else:
            updated = await self._store.apply_progress(job.id, progress)
        if updated is not None:  # wakes the webhook delivery when the job has a webhook
            self._notifier.job_changed(job.id, updated)
