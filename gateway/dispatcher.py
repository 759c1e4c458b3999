"""The dispatcher: hands committed jobs to their provider, within its concurrency limit.

A job is stored first (``creating``), then submitted (docs/architecture.md, "The data path").
Per round, for each provider, the dispatcher leases at most ``max_concurrency`` minus
the jobs already in flight there, oldest first, and submits them concurrently:

* accepted -> ``queued`` or ``running`` with the provider's job id, the next check (poll
  or watchdog probe) scheduled; answered with the result -> applied (one write when it
  copies no file);
* a provider that could not be reached at all (no connection, a certificate that does
  not verify) for its ``submit_timeout_s`` since the job's first such failure (in this
  process) -> ``failed`` with the last reason, in its error and its logs
  (:meth:`Dispatcher._unreached`; docs/providers.md, "TLS to providers");
* ``ProviderBusy`` (Cog 409/503, 429) or a retryable failure -> stays ``queued`` and is
  tried again after an exponential backoff with full jitter (a job an earlier submit
  may have reached stays "maybe submitted", :data:`gateway.store.claims.RESUBMITTING`,
  so a cancel or deadline still goes through the provider: docs/reliability.md; so is
  one whose submit failed in transit, ``unreachable``, but not one that found no
  connection, :data:`NOT_CONNECTED`: nothing was sent);
* ``UpstreamRejected`` -> ``failed`` with the provider's reason; the refused resubmit of
  a job an earlier submit may have reached leaves it "maybe submitted", tried again
  after :data:`REFUSED_RESUBMIT_WAIT_S` (docs/lifecycle.md, "The submit window");
* the resubmit of such a job that the app canceled (or whose deadline passed) is how
  the gateway learns the provider's id to cancel it there: refused, the job ends
  ``canceled`` at once; busy or unreachable, it is tried again every
  ``cancel_resend_s`` at most, and ends ``canceled`` once ``cancel_grace_s`` has passed
  since the cancel with :data:`gateway.finalizer.ASKS_BEFORE_GIVING_UP` tries failed;
* an unexpected exception -> tried again like a retryable failure, and ``failed`` once
  the job's submit has crashed ``max_attempts`` times (busy answers are no crash);
* a cancel requested while the submit was in flight -> the provider is told to cancel
  (the reaper woken to send it then); a job the provider finished meanwhile (its webhook
  overtook the submit) keeps its provider id and is not canceled.

Each job is one item of the round (:func:`gateway.boundary.each`): an error in one never
reaches its siblings or the round. The claim counts the provider's jobs in flight (in
every process) inside its own transaction, so ``max_concurrency`` holds across processes.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from contracts.errors import (
    CutoverError,
    ProviderBusy,
    UpstreamRejected,
    UpstreamRetryable,
    UpstreamUnreachable,
)
from contracts.job import Job, JobState
from contracts.snapshot import ProviderRef, ProviderSnapshot, SubmitRequest
from gateway import boundary, fairness, logs, retry
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.fairness import Candidate
from gateway.files.inputs import InputStager
from gateway.files.outputs import AssetError
from gateway.finalizer import ASKS_BEFORE_GIVING_UP, Finalizer, why_never_started
from gateway.loop import Loop
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.providers import Provider, callback_url
from gateway.rollout.shadowgate import DROPPED, ShadowGate
from gateway.store.claims import RESUBMITTING
from gateway.store.jobs import JobStore
from gateway.store.rescue import NEVER_SENT
from gateway.translation.maps import MapError
from gateway.translation.translator import Translator

__all__ = ["NOT_CONNECTED", "REFUSED_RESUBMIT_WAIT_S", "Dispatcher", "callback_url"]

log = logging.getLogger(__name__)
MAX_RETRY_AFTER_S = 300.0
REFUSED_RESUBMIT_WAIT_S = 60.0  # before a job whose resubmit was refused (4xx) goes again
NOT_CONNECTED = NEVER_SENT  # a rollback moves such a job to the control (store.rescue)
"""``raw_status`` of a job whose submit found no connection to the provider: unlike
``unreachable`` (failed in transit) it is not "maybe submitted"."""


class Dispatcher(Loop):
    """Submits due jobs; see the module docstring for the outcomes."""

    name = LoopName.DISPATCHER

    def __init__(
        self,
        *,
        store: JobStore,
        providers: dict[str, Provider],
        finalizer: Finalizer,
        notifier: Notifier,
        callback_base_url: str,
        backoff: retry.Backoff,
        interval_s: float,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        resolve_input: Callable[[Any], Any] | None = None,
        stager: InputStager | None = None,
        max_attempts: int = boundary.MAX_ATTEMPTS,
        shadow_gate: ShadowGate | None = None,
        cancel_grace_s: float = 30.0,
        cancel_resend_s: float = 2.0,
        translator: Translator | None = None,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._translator = translator
        self._metrics = metrics
        self._stager = stager
        self._last_served: dict[str, float] = {}  # fairness: API token -> when last served
        self._served_tick = 0.0
        # Gateway file URLs in inputs -> URLs the provider can fetch (gateway/files/service.py).
        self._resolve_input = resolve_input or (lambda value: value)
        self._store = store
        self._providers = providers
        self._finalizer = finalizer
        self._callback_base_url = callback_base_url
        self._backoff = backoff
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not security)
        self._max_attempts = max_attempts
        self._shadow_gate = shadow_gate
        self._grace = timedelta(seconds=cancel_grace_s)
        self._resend_s = cancel_resend_s
        # Job id -> failed resubmits since its cancel (or deadline), in this process only,
        # so a restart tries more often, never less (as the reaper's asks).
        self._stop_asks: dict[str, int] = {}
        # Job id -> when its submit first found no connection, in this process only (a
        # restart gives the provider its whole submit_timeout_s again, never less).
        self._unreached_since: dict[str, datetime] = {}
        self._crashes: dict[str, int] = {}  # job id -> its submits that crashed, here

    async def run_once(self) -> int:
        handled = 0
        for provider in self._providers.values():
            claimed = await self._store.claim_dispatch(
                provider.name, provider.max_concurrency, self._fair_order,
                lost_is_idle=provider.adapter.capabilities.lost_is_idle,
            )
            if self._shadow_gate is not None:
                claimed, dropped = await self._shadow_gate.split(claimed, self._store.release)
                for job in dropped:
                    await self._finalizer.finish_here(job, JobState.CANCELED, DROPPED)
            await boundary.each(claimed, functools.partial(self._submit, provider), self._failed)
            handled += len(claimed)
        return handled

    def _fair_order(self, candidates: list[Candidate], limit: int) -> list[Candidate]:
        """Round-robin across API tokens, least recently served first, by route priority
        (gateway/fairness.py); remembers whom it served (per process)."""
        chosen = fairness.fair_order(candidates, self._last_served, limit)
        for candidate in chosen:
            self._served_tick += 1.0
            self._last_served[candidate.owner] = self._served_tick
        return chosen

    async def _failed(self, job: Job, exc: BaseException, verdict: boundary.Verdict) -> None:
        """One job's dispatch raised after its submit (:mod:`gateway.boundary`)."""
        context = {"job_id": job.id, "provider": job.provider, "error": boundary.describe(exc)}
        log.warning("dispatch_item_failed", extra={**context, "verdict": verdict.value})
        delay = self._backoff.delay_s(job.attempts + 1, self._rng)
        due = self._clock.now() + timedelta(seconds=delay)
        await self._store.release(job.id, next_attempt_at=due)

    async def _submit(self, provider: Provider, job: Job) -> None:
        webhook_url = None
        if provider.adapter.capabilities.webhooks:  # no URL for a provider that never calls
            token_row = await self._store.callback_token(job.id)
            assert token_row is not None
            webhook_url = callback_url(self._callback_base_url, job, token_row[1])
        try:
            model_input = await self._stage(provider, job, self._mapped_input(provider, job))
        except (AssetError, MapError) as exc:
            await self._refused(job, exc.detail)
            return
        request = SubmitRequest(
            job_id=job.id, input=self._resolve_input(model_input), webhook_url=webhook_url,
            model=job.model, version=job.version, deadline=job.deadline, target=job.target,
        )
        try:
            snapshot = await provider.adapter.submit(request)
        except ProviderBusy as exc:
            self._count(provider, "busy")
            await self._defer(job, "busy", exc.retry_after_s)
            return
        except UpstreamRetryable as exc:
            self._count(provider, "unreachable")
            log.warning("submit_failed", extra={"job_id": job.id, "error": exc.detail})
            # Failed in transit, it may have reached the provider (MAYBE_SUBMITTED); with
            # no connection made, it did not: a cancel or deadline then needs no provider.
            sent = not isinstance(exc, UpstreamUnreachable)
            if sent:
                await self._defer(job, "unreachable", exc.retry_after_s)
            elif not await self._unreached(provider, job, exc.detail):
                # The last try comes when submit_timeout_s runs out, not a backoff later.
                until = self._unreached_since[job.id] + timedelta(
                    seconds=provider.submit_timeout_s)
                await self._defer(job, NOT_CONNECTED, exc.retry_after_s, until=until)
            return
        except UpstreamRejected as exc:
            self._unreached_since.pop(job.id, None)
            self._count(provider, "rejected")
            await self._rejected(job, exc.detail)
            return
        except Exception as exc:  # noqa: BLE001 (a crash: retried, then the job ends)
            await self._crashed(provider, job, exc)
            return
        self._unreached_since.pop(job.id, None)
        self._crashes.pop(job.id, None)
        self._count(provider, "accepted")
        await self._accepted(provider, job, request, snapshot)

    async def _refused(self, job: Job, detail: str) -> None:
        if self._shadow_gate is not None:  # a shadow: counted as provider_refused
            self._shadow_gate.refused(job)
        await self._finalizer.finish_here(job, JobState.FAILED, detail)

    async def _unreached(self, provider: Provider, job: Job, detail: str) -> bool:
        """The submit found no connection to ``provider`` (``detail`` says why: ``cannot
        connect``, ``certificate verify failed: ...``). Once that has lasted its
        ``submit_timeout_s`` the job fails with the reason, and True is returned; until
        then the submit is retried (False). A job an earlier submit may have reached
        (:data:`RESUBMITTING`) is left to its own rules: the provider may be running it."""
        now = self._clock.now()
        since = self._unreached_since.setdefault(job.id, now)
        if job.raw_status == RESUBMITTING:
            return False
        waited = (now - since).total_seconds()
        if waited < provider.submit_timeout_s:
            return False
        del self._unreached_since[job.id]
        error = (f"provider {provider.name!r} could not be reached for "
                 f"{provider.submit_timeout_s:g} s (submit_timeout_s): {detail}")
        log.warning("submit_gave_up", extra={"job_id": job.id, "provider": provider.name,
                                             "error": detail})
        await self._finalizer.finish_here(job, JobState.FAILED, error, logs=error + "\n")
        return True

    async def _rejected(self, job: Job, detail: str) -> None:
        """The provider refused the submit: the job fails. A refused *resubmit* says
        nothing of the earlier submit that may have reached the provider: the job stays
        "maybe submitted" and is tried again after :data:`REFUSED_RESUBMIT_WAIT_S`, until
        the provider's webhook settles it or the maximum lifetime ends it (docs/lifecycle.md,
        "The submit window")."""
        if job.raw_status != RESUBMITTING:
            await self._refused(job, detail)
            return
        log.warning("resubmit_rejected", extra={"job_id": job.id, "error": detail})
        if self._stopped(job):  # nothing the provider would take, nothing to cancel there
            self._stop_asks.pop(job.id, None)
            await self._finalizer.finish_here(job, JobState.CANCELED, why_never_started(job))
            return
        await self._defer(job, RESUBMITTING, REFUSED_RESUBMIT_WAIT_S)

    def _stopped(self, job: Job) -> bool:
        """Canceled by the app, or past its deadline."""
        passed = job.deadline is not None and job.deadline <= self._clock.now()
        return job.cancel_requested_at is not None or passed

    async def _gave_up(self, job: Job) -> bool:
        """A resubmit of a canceled (or expired) job that an earlier submit may have
        reached went unanswered (busy, unreachable, crashed): end it ``canceled`` once
        the provider had the cancel grace and :data:`ASKS_BEFORE_GIVING_UP` tries to
        take it (it then tells the provider's id, so the cancel reaches it)."""
        if job.raw_status != RESUBMITTING or not self._stopped(job):
            return False
        failed = self._stop_asks.get(job.id, 0) + 1
        self._stop_asks[job.id] = failed
        since = job.cancel_requested_at or job.deadline
        assert since is not None
        if failed < ASKS_BEFORE_GIVING_UP or self._clock.now() - since < self._grace:
            return False
        del self._stop_asks[job.id]
        log.warning("resubmit_gave_up", extra={"job_id": job.id, "failed": failed})
        await self._finalizer.finish_here(job, JobState.CANCELED, why_never_started(job))
        return True

    def _mapped_input(self, provider: Provider, job: Job) -> dict[str, Any]:
        """The input through the route's map for ``provider`` (docs/translation.md)."""
        if self._translator is None:
            return job.input
        return self._translator.input(job, provider.name, job.input)

    async def _stage(self, provider: Provider, job: Job, value: dict[str, Any]) -> dict[str, Any]:
        """The input in the form the provider takes (large files as owned URLs)."""
        limit = provider.adapter.capabilities.max_inline_input_bytes
        if self._stager is None or limit is None:
            return value
        return dict(await self._stager.stage(job.id, value, limit))

    async def _crashed(self, provider: Provider, job: Job, exc: Exception) -> None:
        """Retried; failed at the ``max_attempts``-th crash (busy answers are no crash)."""
        self._crashes[job.id] = crashes = self._crashes.get(job.id, 0) + 1
        context = {"job_id": job.id, "provider": provider.name, "attempt": crashes}
        if crashes < self._max_attempts:
            self._count(provider, "unreachable")
            log.warning("submit_crashed", extra={**context, "error": boundary.describe(exc)})
            await self._defer(job, "crashed", None)
            return
        del self._crashes[job.id]
        self._count(provider, "rejected")
        log.error("submit_crashed", exc_info=exc, extra=context)
        error = f"the prediction could not be sent to the provider ({type(exc).__name__})"
        await self._finalizer.finish_here(job, JobState.FAILED, error)

    def _count(self, provider: Provider, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.provider_submits.labels(provider.name, outcome).inc()

    async def _accepted(
        self, provider: Provider, job: Job, request: SubmitRequest, snapshot: ProviderSnapshot
    ) -> None:
        self._stop_asks.pop(job.id, None)
        # The provider acted: record it through a blip in the store rather than submit twice.
        terminal = snapshot.state.terminal
        if terminal and self._finalizer.copies_nothing(job, snapshot):  # one write for all
            await boundary.retry_store(lambda: self._finalizer.finalize(job, snapshot))
            return
        next_check = provider.first_check_at(self._clock.now())
        first = self._finalizer.progress(job, snapshot)
        # A result to copy: the job stays leased here, renewed while its outputs are
        # copied, so no poller fetches and copies them again meanwhile.
        updated = await boundary.retry_store(
            lambda: self._store.mark_submitted(
                job.id, snapshot.provider_job_id, first, next_check, keep_lease=terminal
            )
        )
        if terminal:
            await self._apply_result(job, snapshot, next_check)
            return
        if updated is None:
            await self._finished_meanwhile(provider, job, request, snapshot)
            return
        self._notifier.job_changed(job.id, updated)
        if self._stopped(updated):  # canceled (or expired) while the submit was in flight:
            self._notifier.wake(LoopName.REAPER)  # it sends the cancel now, not at the grace
        if next_check is not None:  # an idle poller may sleep past it (loop_max_idle_s)
            self._notifier.due(LoopName.POLLER, next_check)
        logs.info(log, "job_submitted", {"job_id": job.id, "provider": provider.name})

    async def _apply_result(
        self, job: Job, snapshot: ProviderSnapshot, next_check: datetime | None
    ) -> None:
        """A submit that answered with the result: apply it under the job's apply lease
        (:meth:`JobStore.applying`; its provider events wait meanwhile), unless events of
        the job wait to be applied (a webhook that overtook the answer, its copy perhaps
        under way): they say the same, and the first poll follows in case they do not.
        A provider that cannot be polled applies the result regardless."""
        async with self._store.applying(job.id, unless_events=next_check is not None) as held:
            if held:
                await self._finalizer.finalize(await self._store.get(job.id), snapshot)
                return
        await self._store.release(job.id, next_attempt_at=next_check)  # if still active
        if next_check is not None:
            self._notifier.due(LoopName.POLLER, next_check)

    async def _finished_meanwhile(
        self, provider: Provider, job: Job, request: SubmitRequest, snapshot: ProviderSnapshot
    ) -> None:
        """The job ended while its submit was in flight. Canceled by the app (or its
        deadline): tell the provider. Finished by the provider (its webhook overtook the
        submit): nothing to do."""
        current = await self._store.get(job.id)
        if current.cancel_requested_at is None and current.state is not JobState.CANCELED:
            return
        if not provider.adapter.capabilities.cancel:
            return
        ref = ProviderRef(
            job_id=job.id, provider_job_id=snapshot.provider_job_id, input=job.input,
            webhook_url=request.webhook_url, target=job.target,
        )
        try:
            await provider.adapter.cancel(ref)
        except CutoverError as exc:  # the reaper does not resend for a finished job
            log.warning("cancel_failed", extra={"job_id": job.id, "error": exc.detail})

    async def _defer(
        self, job: Job, why: str, retry_after_s: float | None, until: datetime | None = None
    ) -> None:
        """Try ``job`` again after a backoff (the provider's ``Retry-After`` if longer),
        and no later than ``until`` when given."""
        if await self._gave_up(job):
            return
        if job.raw_status == RESUBMITTING:  # an earlier submit may have reached it
            why = RESUBMITTING
        delay = self._backoff.delay_s(job.attempts + 1, self._rng)
        if retry_after_s is not None:  # the provider's own wait, up to 300 s
            delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
        if job.id in self._stop_asks:  # a cancel to deliver: as often as the reaper resends
            delay = min(delay, self._resend_s)
        due = self._clock.now() + timedelta(seconds=delay)
        if until is not None:
            due = min(due, until)
        await self._store.defer(job.id, next_attempt_at=due, raw_status=why)
