"""Provider webhook intake: verify, persist, acknowledge; then apply in order.

A provider calls ``POST /provider-webhooks/{provider}/{job_id}/{token}``. Before the body
is parsed (DESIGN invariant 5): the job must exist and belong to that provider, the
token must match the job's unguessable callback token (constant-time), and the adapter
must verify the request (a signature, or Cog's bearer token). The raw, verified body is
then stored once (deduplicated on its SHA-256 per job) and acknowledged; if it cannot be
stored, the answer is 503 so the provider retries (providers.md §1.9). The
:class:`EventProcessor` applies stored events in arrival order: terminal snapshots go to
the finalizer, others update the job's progress. Events survive a restart unprocessed
and are applied when the gateway returns.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta

from contracts.errors import CutoverError, WebhookVerificationError
from contracts.job import JobState
from gateway.clock import Clock, utcnow
from gateway.finalizer import Finalizer
from gateway.loop import Loop
from gateway.notify import Notifier
from gateway.providers import Provider
from gateway.store.events import ProviderEvent, ProviderEvents
from gateway.store.jobs import JobStore, Progress

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
        clock: Clock = utcnow,
    ) -> None:
        self._store = store
        self._events = events
        self._providers = providers
        self._notifier = notifier
        self._clock = clock

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
            or not hmac.compare_digest(known[1].encode(), token.encode())
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
        provider_name = provider.name
        await provider.adapter.verify_webhook(headers, body)
        if provider.adapter.capabilities.webhook_poke:  # unsigned: only a reason to ask now
            await self._store.check_now(job_id)
            self._notifier.wake("poller")
            return True
        if not await self._events.add(job_id, provider_name, body):
            return False
        self._notifier.wake(EventProcessor.name)
        interval = timedelta(seconds=provider.adapter.capabilities.fetch_interval_s)
        await self._store.postpone_check(job_id, self._clock() + interval)
        return True


class EventProcessor(Loop):
    """Applies stored provider events, oldest first, one job's events in order."""

    name = "events"

    def __init__(
        self,
        *,
        store: JobStore,
        events: ProviderEvents,
        providers: dict[str, Provider],
        finalizer: Finalizer,
        notifier: Notifier,
        interval_s: float,
        batch: int = 64,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s)
        self._store = store
        self._events = events
        self._providers = providers
        self._finalizer = finalizer
        self._batch = batch

    async def run_once(self) -> int:
        events = await self._events.claim(self._batch)
        by_job: defaultdict[str, list[ProviderEvent]] = defaultdict(list)
        for event in events:
            by_job[event.job_id].append(event)
        await asyncio.gather(*(self._apply_all(job_events) for job_events in by_job.values()))
        return len(events)

    async def _apply_all(self, events: list[ProviderEvent]) -> None:
        for event in events:
            try:
                await self._apply(event)
            except CutoverError as exc:
                log.warning(
                    "provider_event_rejected",
                    extra={"job_id": event.job_id, "provider": event.provider, "error": exc.detail},
                )
            except Exception:  # one event's boundary: never let it block the others
                log.exception(
                    "provider_event_failed",
                    extra={"job_id": event.job_id, "provider": event.provider},
                )
            await self._events.mark_processed(event.id)

    async def _apply(self, event: ProviderEvent) -> None:
        provider = self._providers.get(event.provider)
        if provider is None:
            return
        snapshot = provider.adapter.parse_webhook(event.body)
        job = await self._store.get(event.job_id)
        if job.state.terminal:
            log.info("late_provider_event", extra={"job_id": job.id, "raw": snapshot.raw_status})
            return
        if job.provider_job_id is not None and snapshot.provider_job_id != job.provider_job_id:
            log.warning(
                "provider_event_for_another_job",
                extra={"job_id": job.id, "provider": job.provider},
            )
            return
        if snapshot.state.terminal:
            await self._finalizer.finalize(job, snapshot)
            return
        state = snapshot.state if snapshot.state is not JobState.CREATING else JobState.QUEUED
        updated = await self._store.apply_progress(
            job.id, Progress(state, snapshot.raw_status, snapshot.output, snapshot.logs)
        )
        if updated is not None:
            self._notifier.job_changed(job.id, updated)
            self._notifier.wake("delivery")
