"""Adopting predictions the legacy provider started (docs/cutover-day.md).

With ``[gateway] legacy_provider = "NAME"`` (a provider of kind ``replicate``), a GET or
cancel of a prediction id the gateway does not know is looked up at that provider
(``GET /v1/predictions/{id}``). A prediction it knows is stored under the same id,
marked ``adopted``, with the upstream's object kept in ``jobs.upstream``; its provider is
the legacy provider and its provider job id the upstream id, so the poller tracks it to a
terminal state and the finalizer copies its output files to owned storage, as for any
prediction. One already finished is finalized at once (its files expire within the hour
upstream). Webhooks the app asked for at create stay the legacy provider's business.

Lookups are bounded, so unknown ids cannot become a flood upstream:

* ids of another shape than a prediction id (:data:`gateway.ids.PREDICTION_ID_RE`) are
  never looked up;
* concurrent lookups of one id share one upstream call;
* an id the upstream does not know is not looked up again for ``unknown_ttl_s`` seconds
  (a negative cache of at most :data:`NEGATIVE_CACHE_IDS` ids);
* a token bucket (``lookups_per_s``, ``burst``) bounds upstream lookups; past it a lookup
  answers 503, which the official clients retry.

A GET in the read lane (``[gateway] read_concurrency``, gateway/http/readlane.py) gives its
slot back before it waits on a lookup (:func:`gateway.readslot.give_back`): polls of known
predictions never queue behind the legacy provider's answers.

So N GETs of unknown ids cost at most ``burst + lookups_per_s * seconds`` lookups.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from contracts.auth import DEFAULT_TENANT
from contracts.errors import ContractViolation, NotFound, ServiceUnavailable
from contracts.job import Job, JobState
from contracts.snapshot import ProviderSnapshot
from contracts.times import parse_time
from gateway import ids, readslot
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.finalizer import Finalizer
from gateway.notify import LoopName, Notifier
from gateway.rollout.spec import route_key
from gateway.store.adoptions import insert_adopted
from gateway.store.engine.aio import Engine

__all__ = ["NEGATIVE_CACHE_IDS", "Adopter", "LegacyLookup", "adopted_row",
           "upstream_time"]

log = logging.getLogger(__name__)
NEGATIVE_CACHE_IDS = 100_000
_VERSION_CHARS = 64
_FINISHED_POLL_DELAY_S = 60.0  # a finished one is finalized here; polled only if that fails


class LegacyLookup(Protocol):
    """What the adopter needs of the legacy provider's adapter (adapters/replicate.py)."""

    async def lookup(
        self, prediction_id: str
    ) -> tuple[dict[str, Any], ProviderSnapshot] | None: ...


class Adopter:
    """Looks unknown prediction ids up at the legacy provider and adopts what it knows.

    Parameters
    ----------
    provider : str
        The legacy provider's name (``[gateway] legacy_provider``).
    adapter : callable
        Gives the provider's adapter (the adapters exist once the app has started).
    engine, finalizer, notifier, clock
        The gateway's.
    lookups_per_s, burst : float, int
        The token bucket of upstream lookups.
    unknown_ttl_s : float
        How long an id the upstream does not know is not looked up again, in seconds.
    """

    def __init__(
        self,
        *,
        provider: str,
        adapter: Callable[[], LegacyLookup],
        engine: Engine,
        finalizer: Finalizer,
        notifier: Notifier,
        lookups_per_s: float,
        burst: int,
        unknown_ttl_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.provider = provider
        self._adapter = adapter
        self._engine = engine
        self._finalizer = finalizer
        self._notifier = notifier
        self._rate = lookups_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._filled_at = clock.monotonic()
        self._unknown_ttl_s = unknown_ttl_s
        self._unknown: OrderedDict[str, float] = OrderedDict()  # id -> looked up at
        self._inflight: dict[str, asyncio.Future[Job]] = {}
        self._clock = clock
        self.lookups = 0  # upstream lookups made (tests and metrics read it)

    async def adopt(self, job_id: str, tenant: str = DEFAULT_TENANT) -> Job:
        """The adopted job for ``job_id`` (stored now, or by a concurrent call).

        It belongs to ``tenant`` (the caller's), as if that tenant had created it; a call
        of another tenant meanwhile finds it and is answered 404.

        Raises
        ------
        NotFound
            A malformed id, or one the legacy provider does not know (now, or within
            ``unknown_ttl_s`` seconds).
        ServiceUnavailable
            The lookup budget is spent (retry in a second).
        UpstreamRetryable
            The legacy provider could not answer.
        """
        if not ids.PREDICTION_ID_RE.match(job_id) or self._known_unknown(job_id):
            raise _not_found(job_id)
        readslot.give_back()  # the lookup waits on the legacy provider: not in the lane
        running = self._inflight.get(job_id)
        if running is not None:
            return _for(await asyncio.shield(running), tenant)
        if not self._take_token():
            raise ServiceUnavailable(
                f"prediction {job_id!r} is not known here and the lookups at the legacy "
                f"provider {self.provider!r} are over their rate; retry in a second"
            )
        future: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
        self._inflight[job_id] = future
        try:
            job = await self._look_up(job_id, tenant)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(job)
            return _for(job, tenant)
        finally:
            del self._inflight[job_id]

    async def _look_up(self, job_id: str, tenant: str) -> Job:
        self.lookups += 1
        found = await self._adapter().lookup(job_id)
        if found is None:
            self._remember_unknown(job_id)
            raise _not_found(job_id)
        raw, snapshot = found
        row = adopted_row(self.provider, raw, snapshot, tenant, self._clock.now())
        job, inserted = await insert_adopted(self._engine, row)
        if not inserted:
            return job
        log.info("prediction_adopted", extra={"job_id": job_id, "provider": self.provider,
                                              "state": snapshot.state.value})
        if snapshot.state.terminal:  # its files expire upstream: copied now
            return await self._finalizer.finalize(job, snapshot)
        self._notifier.wake(LoopName.POLLER)
        return job

    def _known_unknown(self, job_id: str) -> bool:
        at = self._unknown.get(job_id)
        if at is None:
            return False
        if self._clock.monotonic() - at < self._unknown_ttl_s:
            return True
        del self._unknown[job_id]
        return False

    def _remember_unknown(self, job_id: str) -> None:
        self._unknown[job_id] = self._clock.monotonic()
        self._unknown.move_to_end(job_id)
        while len(self._unknown) > NEGATIVE_CACHE_IDS:
            self._unknown.popitem(last=False)

    def _take_token(self) -> bool:
        now = self._clock.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._filled_at) * self._rate)
        self._filled_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def adopted_row(provider: str, raw: dict[str, Any], snapshot: ProviderSnapshot,
                tenant: str, now: datetime) -> dict[str, Any]:
    """The ``jobs`` row of an upstream prediction adopted at ``now``: submitted, active
    (a terminal one's outcome is the finalizer's, or the importer's, to write), its model,
    version, input and creation time the upstream's, the upstream object kept."""
    model = _text(raw.get("model")) or "legacy/unknown"
    version = _text(raw.get("version")) or "hidden"
    if len(version) > _VERSION_CHARS:
        version = "hidden"
    urls = raw.get("urls")
    urls = urls if isinstance(urls, dict) else {}
    state = snapshot.state if not snapshot.state.terminal else JobState.RUNNING
    if state is JobState.CREATING:
        state = JobState.QUEUED
    started = upstream_time(raw.get("started_at"))
    started = started or (now if state is JobState.RUNNING else None)
    later = now + timedelta(seconds=_FINISHED_POLL_DELAY_S)
    return {
        "id": snapshot.provider_job_id, "state": state.value,
        "raw_status": snapshot.raw_status, "model": model[:255], "version": version,
        "deployment": _text(raw.get("deployment")), "route": route_key(model, None)[:255],
        "provider": provider, "provider_job_id": snapshot.provider_job_id,
        "input": raw["input"] if isinstance(raw.get("input"), dict) else {},
        "created_at": upstream_time(raw.get("created_at")) or now, "updated_at": now,
        "submitted_at": now, "started_at": started,
        "next_attempt_at": later if snapshot.state.terminal else now, "attempts": 0,
        "callback_token": ids.callback_token(), "stream": bool(urls.get("stream")),
        "tenant": tenant, "adopted": True, "upstream": raw,
    }


def upstream_time(value: Any) -> datetime | None:
    """An upstream timestamp (``created_at``...) as a UTC datetime; None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value, "created_at")
    except ContractViolation:
        return None


def _for(job: Job, tenant: str) -> Job:
    """``job`` if ``tenant``'s (a row adopted meanwhile may be another tenant's)."""
    if job.tenant != tenant:
        raise _not_found(job.id)
    return job


def _not_found(job_id: str) -> NotFound:
    return NotFound(f"prediction {job_id!r} does not exist")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None

