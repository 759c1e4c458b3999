"""The one finalizer: every road to a terminal state ends here (docs/architecture.md,
"The data path").

Webhooks, polls, the watchdog, cancels and deadlines all hand a terminal observation to
:meth:`Finalizer.finalize`. It checks the provider job id, checks the output against the
model's ``Output`` schema (:mod:`gateway.translation.conformance`: a mismatch fails the job, the raw
output kept for operators), copies output files into owned storage, then records the
terminal state, the asset rows and the ``completed`` outbox event in one transaction
(:meth:`gateway.store.jobs.JobStore.finish`). A call for a job that is already terminal
is a no-op that returns the stored result.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any

from adapters import errortext
from contracts.errors import ContractViolation
from contracts.job import Job, JobState
from contracts.snapshot import ErrorClass, ProviderSnapshot
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.files.outputs import AssetError, OutputCopier, has_files
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.store.jobs import JobStore, Outcome, Progress, ValueRefused
from gateway.translation.conformance import OutputContract, OutputMismatch
from gateway.translation.maps import MapError
from gateway.translation.translator import Translator
from gateway.validation import noted_logs
from gateway.wire import timestamp

__all__ = ["ASKS_BEFORE_GIVING_UP", "Finalizer", "InterimBudget", "why_never_started"]

log = logging.getLogger(__name__)
ASKS_BEFORE_GIVING_UP = 3
"""Failed asks of the provider before the gateway ends an overdue job on its own."""


class InterimBudget:
    """How much of a running prediction's time its interim output maps may take.

    The output map runs on the whole output so far at each interim update (a streamed
    list of N chunks: N runs on lists growing to N, quadratic; 3,000 chunks cost 25 s
    of CPU on the event loop, bench/maps.py ``--stream``). An interim output is mapped
    while the map CPU seconds this job's interim outputs took in this process are at
    most ``free_s`` plus ``share`` of the seconds since its first one; past that the
    update keeps the output shown before (older, never wrong: it still has the final
    form) and brings its state and logs only. Cheap maps (microseconds) are never
    skipped; the terminal output is always mapped (docs/translation.md, "Interim
    outputs of a mapped route").

    Parameters
    ----------
    share : float
        The fraction of a prediction's running time its interim maps may take (0..1).
    free_s : float
        Map seconds every prediction may spend before the share applies.
    clock : Clock
        The time since a job's first interim map (its ``monotonic``).
    jobs : int
        Jobs remembered at most (the oldest is forgotten: it is mapped afresh).
    """

    def __init__(self, *, share: float = 0.1, free_s: float = 0.005,
                 clock: Clock = SYSTEM_CLOCK, jobs: int = 10_000) -> None:
        self._share = share
        self._free_s = free_s
        self._clock = clock
        self._limit = jobs
        self._spent: OrderedDict[str, tuple[float, float]] = OrderedDict()  # id -> (s, since)

    def allows(self, job_id: str) -> bool:
        """Whether ``job_id``'s next interim output is mapped."""
        spent = self._spent.get(job_id)
        if spent is None:
            return True
        seconds, since = spent
        return seconds <= self._free_s + self._share * (self._clock.monotonic() - since)

    def spent(self, job_id: str, seconds: float) -> None:
        """Count ``seconds`` of map CPU time against ``job_id``."""
        before, since = self._spent.pop(job_id, (0.0, self._clock.monotonic()))
        self._spent[job_id] = (before + seconds, since)
        while len(self._spent) > self._limit:
            self._spent.popitem(last=False)

    def forget(self, job_id: str) -> None:
        """``job_id`` finished: nothing more to count."""
        self._spent.pop(job_id, None)


class Finalizer:
    """Records terminal outcomes exactly once."""

    def __init__(
        self,
        *,
        store: JobStore,
        copier: OutputCopier,
        notifier: Notifier,
        file_hosts: Mapping[str, Collection[str]] | None = None,
        metrics: Metrics | None = None,
        translator: Translator | None = None,
        contract: OutputContract | None = None,
        interim: InterimBudget | None = None,
    ) -> None:
        self.interim = interim or InterimBudget()
        self._translator = translator
        self._store = store
        self._contract = contract
        self._copier = copier
        self._notifier = notifier
        self._file_hosts = file_hosts or {}
        self._metrics = metrics

    async def finalize(self, job: Job, snapshot: ProviderSnapshot) -> Job:
        """Record ``snapshot`` (terminal) as the outcome of ``job``.

        Raises
        ------
        ContractViolation
            When the snapshot's provider job id is not the job's, or it is not terminal.
        """
        if job.state.terminal:
            self.late(job, snapshot)
            return job
        if not snapshot.state.terminal:
            raise ContractViolation(f"snapshot for {job.id} is not terminal")
        if job.provider_job_id is not None and snapshot.provider_job_id != job.provider_job_id:
            raise ContractViolation(
                f"snapshot names provider job {snapshot.provider_job_id!r}, "
                f"job {job.id} has {job.provider_job_id!r}"
            )
        outcome = await self.outcome(job, snapshot)
        return await self._record(job, outcome, self.error_class(outcome, snapshot), snapshot)

    @staticmethod
    def error_class(outcome: Outcome, snapshot: ProviderSnapshot) -> ErrorClass | None:
        """Who must act on a failed ``outcome`` (the snapshot's class); None otherwise."""
        return snapshot.error_class if outcome.state is JobState.FAILED else None

    def copies_nothing(self, job: Job, snapshot: ProviderSnapshot) -> bool:
        """Whether :meth:`outcome` of ``snapshot`` for ``job`` fetches no file: no output map
        on its route (a map may make a file of anything), no provider file in the output."""
        return not self._maps_output(job) and not has_files(
            snapshot.output, self._file_hosts.get(job.provider, ()))

    def decides_offline(self, job: Job, snapshot: ProviderSnapshot) -> bool:
        """Whether :meth:`outcome` of ``snapshot`` for ``job`` does no network I/O: it
        fetches no file (:meth:`copies_nothing`) and, for a completed snapshot, the
        route's ``Output`` schema is held already (none to ask the provider for:
        :meth:`gateway.translation.conformance.OutputContract.held`). What the webhook
        fast path may decide before the provider is answered (gateway/intake.py)."""
        if not self.copies_nothing(job, snapshot):
            return False
        return (snapshot.state is not JobState.COMPLETED or self._contract is None
                or self._contract.held(job.route))

    def late(self, job: Job, snapshot: ProviderSnapshot) -> None:
        """A provider's report of a job that is already final (RunPod's output after an
        acknowledged cancel): logged as ``late_provider_outcome``, never applied; the
        execution time it reports is still counted (docs/providers.md, "runpod")."""
        log.info("late_provider_outcome", extra={
            "job_id": job.id, "provider": job.provider, "state": snapshot.state.value,
            "raw_status": snapshot.raw_status, "stored_state": job.state.value})
        self._execution(job.provider, snapshot)

    def _execution(self, provider: str, snapshot: ProviderSnapshot) -> None:
        seconds = snapshot.metrics.get("predict_time")
        if self._metrics is not None and isinstance(seconds, int | float) and seconds >= 0:
            self._metrics.provider_execution_seconds.labels(provider).inc(seconds)

    def progress(self, job: Job, snapshot: ProviderSnapshot) -> Progress:
        """A snapshot as the job's progress (the one place this is made).

        ``creating`` reads as ``queued``. A terminal snapshot reads as ``queued`` with
        neither output nor logs: its outcome is :meth:`finalize`'s to record. An output
        that still holds provider files (``data:`` URIs, URLs on the provider's file
        hosts) is withheld until the terminal copy: apps never see provider-native shapes
        that change at the end (docs/lifecycle.md, "Interim output"). The route's output
        map runs first (an interim output it fails on is withheld).
        """
        if snapshot.state.terminal:
            return Progress(JobState.QUEUED, snapshot.raw_status)
        state = JobState.QUEUED if snapshot.state is JobState.CREATING else snapshot.state
        output = snapshot.output
        if output is not None and self._maps_output(job):
            if not self.interim.allows(job.id):  # the output shown stays (InterimBudget)
                return Progress(state, snapshot.raw_status, None,
                                noted_logs(job.logs, snapshot.logs))
            began = time.perf_counter()
            try:
                output = self._mapped_output(job, output)
            except MapError:  # withheld; the final output's map fails the prediction
                output = None
            finally:
                self.interim.spent(job.id, time.perf_counter() - began)
        if self._contract is not None:
            output = self._contract.interim(job.route, output)
        if output is not None and has_files(output, self._file_hosts.get(job.provider, ())):
            output = None
        return Progress(state, snapshot.raw_status, output, noted_logs(job.logs, snapshot.logs))

    async def finish_here(
        self, job: Job, state: JobState, error: str | None, logs: str | None = None
    ) -> Job:
        """Record a terminal state decided by the gateway itself (cancel before submit,
        deadline, lifetime, provider lost the job, provider never reached), with the
        prediction's ``logs`` when the gateway has something to tell in them."""
        outcome = Outcome(state=state, raw_status="gateway", error=error, logs=logs)
        return await self._record(job, outcome)

    async def outcome(self, job: Job, snapshot: ProviderSnapshot) -> Outcome:
        """The outcome :meth:`finalize` records for the terminal ``snapshot`` of the active
        ``job`` (the route's output map, the output's conformance, its files copied), not
        recorded: for a caller that records it itself and then calls :meth:`recorded`
        (:class:`gateway.intake.Intake`, in the transaction that stores the webhook)."""
        base: dict[str, Any] = {
            "raw_status": snapshot.raw_status,
            "logs": noted_logs(job.logs, snapshot.logs),
            "metrics": snapshot.metrics,
            "provider_job_id": snapshot.provider_job_id,  # kept if the job has none yet
        }
        if snapshot.state is not JobState.COMPLETED:
            # Outputs of failed and canceled jobs are not kept: they are not owned files.
            # Errors are one line of at most 1 KB with no echoed payloads, whoever made
            # them (docs/providers.md, "Error classes").
            error = errortext.one_line(snapshot.error) if snapshot.error else None
            return Outcome(state=snapshot.state, error=error, **base)
        try:
            output = self._mapped_output(job, snapshot.output)
        except MapError as exc:
            log.warning("output_map_failed", extra={"job_id": job.id, "error": exc.detail})
            return Outcome(state=JobState.FAILED, error=exc.detail,
                           raw_output=snapshot.output, **base)
        if self._contract is not None:  # after the route's output map, before any copy
            try:
                output = await self._contract.conform(job.route, output)
            except OutputMismatch as exc:
                log.warning("output_mismatch", extra={
                    "job_id": job.id, "route": job.route, "provider": job.provider,
                    "error": exc.detail})
                return Outcome(state=JobState.FAILED, error=exc.detail,
                               raw_output=snapshot.output, **base)
        hosts = self._file_hosts.get(job.provider, ())
        try:
            output, records = await self._copier.copy(job.id, output, hosts)
        except AssetError as exc:
            log.warning("output_copy_failed", extra={"job_id": job.id, "error": exc.detail})
            return Outcome(state=JobState.FAILED, error=exc.detail, **base)
        except Exception as exc:  # a job must still end: fail it, not freeze
            log.exception("output_copy_crashed", extra={"job_id": job.id})
            error = f"the output could not be stored ({type(exc).__name__})"
            return Outcome(state=JobState.FAILED, error=error, **base)
        return Outcome(state=JobState.COMPLETED, output=output, assets=records, **base)

    def _maps_output(self, job: Job) -> bool:
        """Whether the job's route has an output map for its provider."""
        return self._translator is not None and self._translator.maps_output(job)

    def _mapped_output(self, job: Job, output: Any) -> Any:
        """The route's output map for the job's provider on ``output`` (docs/translation.md):
        before files are copied, so only the URLs it keeps are fetched."""
        return output if self._translator is None else self._translator.output(job, output)

    async def _record(
        self, job: Job, outcome: Outcome, error_class: ErrorClass | None = None,
        snapshot: ProviderSnapshot | None = None,
    ) -> Job:
        """Store ``outcome``. Only a value the store refuses turns it into ``failed``; a
        transient store error propagates, so the caller's boundary retries the item."""
        self.interim.forget(job.id)
        try:
            done = await self._store.finish(job.id, outcome)
        except ValueRefused as exc:  # a value the store refuses (too long, NUL on PostgreSQL)
            log.warning(
                "outcome_refused_by_store", extra={"job_id": job.id, "error": exc.error}
            )
            error = f"the provider's result could not be stored ({exc.cause})"
            done = await self._store.finish(
                job.id, Outcome(state=JobState.FAILED, raw_status=outcome.raw_status, error=error)
            )
        if done is None:
            self._notify(job)
            stored = await self._store.get(job.id)
            if snapshot is not None:
                self.late(stored, snapshot)
            return stored
        self.recorded(job, done, error_class, snapshot)
        return done

    def recorded(self, job: Job, done: Job, error_class: ErrorClass | None = None,
                 snapshot: ProviderSnapshot | None = None) -> None:
        """What follows once ``job``'s terminal write ``done`` is committed: its waiters
        and the loops woken, its metrics counted, ``job_finished`` logged."""
        self.interim.forget(job.id)
        self._notify(job, done)
        if snapshot is not None:
            self._execution(job.provider, snapshot)
        if self._metrics is not None:
            self._count(done)
        if error_class is not None:
            self._classify(done, error_class)
        log.info(
            "job_finished",
            extra={"job_id": job.id, "provider": job.provider, "state": done.state.value},
        )

    def _notify(self, job: Job, done: Job | None = None) -> None:
        self._notifier.job_changed(job.id, done)  # wakes the delivery for a webhook's rows
        if self._store.may_be_waiting(job.provider):  # a provider slot may have freed
            self._notifier.wake(LoopName.DISPATCHER)

    def _classify(self, done: Job, error_class: ErrorClass) -> None:
        """Count a failure by who must act; a credentials refusal is an operator alert
        (docs/providers.md, "Error classes")."""
        if self._metrics is not None:
            self._metrics.prediction_errors.labels(done.provider, error_class.value).inc()
        if error_class is ErrorClass.GATEWAY_CREDENTIALS:
            log.error("provider_credentials_refused", extra={
                "job_id": done.id, "provider": done.provider, "route": done.route,
                "error": done.error})

    def _count(self, done: Job) -> None:
        assert self._metrics is not None
        metrics, arm = self._metrics, (done.route, done.arm, done.provider)
        metrics.predictions_finished.labels(done.provider, done.state.value).inc()
        metrics.route_predictions.labels(*arm, done.state.value).inc()
        if done.completed_at is not None:
            seconds = (done.completed_at - done.created_at).total_seconds()
            metrics.prediction_seconds.labels(done.provider).observe(seconds)
            metrics.route_seconds.labels(*arm).observe(seconds)


def why_never_started(job: Job) -> str | None:
    """The error of a job ended ``canceled`` before a provider took it: none for an app's
    cancel, else its passed deadline (Replicate's ``aborted``, docs/replicate-api.md §4.3)."""
    if job.cancel_requested_at is not None:
        return None
    return (
        f"the prediction passed its deadline ({timestamp(job.deadline)}) before it started"
    )
