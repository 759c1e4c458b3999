"""Adapter for RunPod serverless queue endpoints (docs/providers.md, "RunPod").

Wire format (``{base}`` is ``https://api.runpod.ai/v2``, the route's target is the
endpoint id, ``Authorization: Bearer $RUNPOD_API_KEY``):

- Submit: ``POST {base}/{endpoint}/run`` ``{"input", "webhook"?, "policy"?: {"ttl"}}``
  -> ``{"id", "status": "IN_QUEUE"}``. The body may be at most 10 MB; a larger input is
  refused before sending. No idempotent submit: a create that fails after it was sent is
  not retried.
- Status: ``GET {base}/{endpoint}/status/{id}`` -> ``{"id", "status", "output"?,
  "error"?, "executionTime"(ms)}``, mapped by :data:`STATUS_MAP` (``RUNNING`` is a
  documented synonym of ``IN_PROGRESS``; ``TIMED_OUT`` is a failure). ``COMPLETED``
  carrying an ``error`` is a failure. A 404 for a job we submitted means RunPod dropped
  it (TTL or result retention, 30 min): failed, unless the job is already final (the
  finalizer then ignores it).
- Cancel: ``POST {base}/{endpoint}/cancel/{id}`` -> ``{"status": "CANCELLED"}``: RunPod's
  terminal state, so the prediction ends ``canceled`` at once and stays so (a worker that
  finishes afterwards cannot turn it ``succeeded``: providers.md §3.4, "treat the first
  terminal state as final"); later reports are logged as ``late_provider_outcome``.
- Webhooks are not signed (nor timestamped): :attr:`Capabilities.webhook_poke` tells
  the gateway to treat one only as a reason to fetch now, after its per-job URL token
  matched. ``/retry`` is never called: a job reported terminal stays so.

``status_method="POST"`` and an empty target fit the local ``runpod`` test server
(``python handler.py --rp_serve_api``), whose routes sit at the root and take POST.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from adapters import errortext, transport
from contracts.errors import CapabilityMissing, ContractViolation, UpstreamRejected
from contracts.job import JobState
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["DEFAULT_BASE_URL", "MAX_RUN_BYTES", "STATUS_MAP", "RunPodAdapter", "map_status"]

_Upstream = transport.Upstream  # the parameter named ``transport`` hides the module

DEFAULT_BASE_URL = "https://api.runpod.ai/v2"
MAX_RUN_BYTES = 10 * 1000 * 1000
#: Larger ``data:`` URIs reach the handler as a URL on the gateway (docs/providers.md).
MAX_INLINE_INPUT_BYTES = 1_000_000
MIN_TTL_MS, MAX_TTL_MS = 10_000, 7 * 24 * 3600 * 1000
EXPIRED_ERROR = "RunPod no longer knows this job (its TTL or result retention ran out)"

#: RunPod's raw status -> canonical state (docs/providers.md, "RunPod").
STATUS_MAP: Mapping[str, JobState] = {
    "IN_QUEUE": JobState.QUEUED,
    "IN_PROGRESS": JobState.RUNNING,
    "RUNNING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELED,
    "TIMED_OUT": JobState.FAILED,
}


def map_status(raw: str) -> JobState:
    """Canonical state of a RunPod status; an unknown word is ``RUNNING`` (non-terminal)."""
    return STATUS_MAP.get(raw, JobState.RUNNING)


class _Job(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str | None = None
    status: str = Field(min_length=1)
    output: Any = None
    error: Any = None
    executionTime: float | None = None  # RunPod's field names
    delayTime: float | None = None


def _error_text(error: Any) -> str:
    """RunPod errors are strings, sometimes a JSON string of ``error_message`` & co."""
    if isinstance(error, str):
        try:
            decoded = json.loads(error)
        except ValueError:
            return errortext.one_line(error)
        error = decoded if isinstance(decoded, Mapping) else error
    if isinstance(error, Mapping):
        kind = error.get("error_type")
        message = error.get("error_message") or json.dumps(errortext.scrub_json(error))
        return errortext.one_line(f"{kind}: {message}" if kind else str(message))
    return errortext.one_line(str(error))


class RunPodAdapter:
    """Drive one RunPod account's serverless endpoints through the adapter port.

    Parameters
    ----------
    name : str
        The provider's configured name.
    token : str or None
        The RunPod API key.
    base_url : str
        ``https://api.runpod.ai/v2`` (or ``RUNPOD_ENDPOINT_BASE_URL``'s value).
    status_method : str
        ``GET`` (the cloud) or ``POST`` (the local test server).
    request_timeout_s, fetch_interval_s, fetch_max_interval_s, rate_limit_per_s
        Call timeout; first and largest poll interval; requests per second (None: none).
    transport : httpx.AsyncBaseTransport or None
        For tests.
    ca_file : str or None
        PEM file of CA certificates trusted besides certifi's (a private CA).
    """

    def __init__(
        self,
        *,
        name: str,
        token: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        status_method: str = "GET",
        request_timeout_s: float = 30.0,
        fetch_interval_s: float = 2.0,
        fetch_max_interval_s: float = 30.0,
        rate_limit_per_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=True, fetch=True, cancel=True, webhook_poke=True, cancel_is_final=True,
            max_inline_input_bytes=MAX_INLINE_INPUT_BYTES,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._status_method = status_method
        self._http = _Upstream(
            name=name, base_url=base_url or DEFAULT_BASE_URL, headers=headers,
            timeout_s=request_timeout_s, rate_limit_per_s=rate_limit_per_s, transport=transport,
            ca_file=ca_file,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """``POST /{endpoint}/run``; ``QUEUED`` with RunPod's job id.

        Raises ``UpstreamRejected`` for an input over 10 MB, a 4xx, an unreadable answer
        or a failure after sending; ``ProviderBusy`` (429); ``UpstreamRetryable`` (5xx,
        cannot connect).
        """
        body: dict[str, Any] = {"input": request.input}
        if request.webhook_url:
            body["webhook"] = request.webhook_url
        ttl_ms = _ttl_ms(request.deadline)
        if ttl_ms is not None:
            body["policy"] = {"ttl": ttl_ms}
        payload = json.dumps(body).encode()
        if len(payload) > MAX_RUN_BYTES:
            raise UpstreamRejected(
                f"{self.name}: the input is {len(payload)} bytes; RunPod's /run takes at most "
                f"{MAX_RUN_BYTES} (pass large files as URLs)"
            )
        job = await self._http.create(
            "submit", "POST", self._path(request.target, "run"), _Job,
            content=payload, headers={"Content-Type": "application/json"},
        )
        if not job.id:
            raise UpstreamRejected(f"{self.name}: submit answered without a job id")
        return self._snapshot(job.id, job)

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """``/status/{id}``; a 404 or an unreadable body fails the job (readable error)."""
        path = self._path(ref.target, "status", ref.provider_job_id)
        response = await self._http.request("status", self._status_method, path, allow=(404,))
        if response.status_code == 404:
            return ProviderSnapshot(provider_job_id=ref.provider_job_id, state=JobState.FAILED,
                                    raw_status="404", error=EXPIRED_ERROR)
        try:
            job = transport.parse(self.name, "status", response, _Job)
        except ContractViolation as exc:
            return ProviderSnapshot(provider_job_id=ref.provider_job_id, state=JobState.FAILED,
                                    raw_status="unreadable", error=exc.detail)
        return self._snapshot(ref.provider_job_id, job)

    async def cancel(self, ref: ProviderRef) -> bool:
        """``POST /cancel/{id}``; True only when RunPod answered ``CANCELLED`` (the job's
        terminal state: :attr:`Capabilities.cancel_is_final`). Another answer, or an
        unreadable one, is no acknowledgement: the cancel is sent again and the status
        decides."""
        path = self._path(ref.target, "cancel", ref.provider_job_id)
        response = await self._http.request("cancel", "POST", path, allow=(404,))
        if response.status_code == 404:
            return False
        try:
            body = transport.json_body(self.name, "cancel", response)
        except ContractViolation:
            return False
        return isinstance(body, Mapping) and body.get("status") == "CANCELLED"

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Nothing to verify: RunPod signs nothing. The gateway checked the URL token and,
        because of :attr:`Capabilities.webhook_poke`, only fetches the status now."""

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """Never trusted: raises ``CapabilityMissing`` (use :meth:`fetch`)."""
        raise CapabilityMissing(f"{self.name}: RunPod webhooks are unsigned; fetch the status")

    def _path(self, target: str | None, action: str, job_id: str | None = None) -> str:
        parts = [target] if target else []
        parts.append(action)
        if job_id is not None:
            parts.append(job_id)
        return "/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)

    def _snapshot(self, job_id: str, job: _Job) -> ProviderSnapshot:
        state = map_status(job.status)
        error = _error_text(job.error) if job.error else None
        if state is JobState.COMPLETED and error:
            state = JobState.FAILED
        if state is JobState.FAILED and not error:
            error = f"{self.name}: the job ended {job.status}"
        metrics = {"predict_time": job.executionTime / 1000} if job.executionTime else {}
        output = job.output if state is JobState.COMPLETED else None
        return ProviderSnapshot(provider_job_id=job_id, state=state, raw_status=job.status,
                                output=output, error=error, metrics=metrics)


def _ttl_ms(deadline: datetime | None) -> int | None:
    """RunPod's job TTL (ms, 10 s to 7 days) from the job's deadline."""
    if deadline is None:
        return None
    left = (deadline - datetime.now(UTC)).total_seconds() * 1000
    return int(min(MAX_TTL_MS, max(MIN_TTL_MS, left)))
