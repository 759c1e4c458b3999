"""The fake provider over HTTP: :class:`adapters.fake.FakeAdapter`'s wire format on a socket.

The in-memory fake serves tests that hold the gateway in their own process. A gateway in
a process of its own (the chaos run, the crash and replica soaks: docs/reliability.md)
needs a provider it can reach over the network; ``chaos.provider`` serves one, and this
adapter drives it. Selected by ``kind = "fake"`` with a ``base_url``.

The wire format (all JSON):

- ``POST /jobs`` ``{"id", "input", "webhook"}`` -> 200 ``{"id", "status", "output",
  "logs", "error"}``. Idempotent by ``id``: a retried submit answers the job as it stands.
- ``GET /jobs/{provider_job_id}`` -> 200 the same shape; 404 when the job is unknown.
- ``POST /jobs/{provider_job_id}/cancel`` -> 200 ``{"canceled": bool}``.
- 429 and 503 mean "not started, try later" (``Retry-After`` in seconds, when given);
  other 5xx and transport errors are retryable; other 4xx are permanent refusals.
- Webhooks: the body of :meth:`FakeAdapter.webhook_body`, signed as :meth:`FakeAdapter.sign`
  (HMAC-SHA256 of the raw body in ``x-fake-signature``), so verification and parsing are
  the in-memory fake's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from adapters import tls
from adapters.fake import FakeAdapter
from contracts.errors import (
    ContractViolation,
    ProviderBusy,
    UpstreamRejected,
    UpstreamRetryable,
    UpstreamUnreachable,
)
from contracts.job import JobState
from contracts.snapshot import ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["RemoteFakeAdapter", "parse_retry_after"]

_BUSY_CODES = frozenset({429, 503})


class _Job(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    status: JobState
    output: Any = None
    logs: str | None = None
    error: str | None = None

    def snapshot(self) -> ProviderSnapshot:
        return ProviderSnapshot(
            provider_job_id=self.id, state=self.status, raw_status=self.status.value,
            output=self.output, logs=self.logs, error=self.error,
        )


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (the delta-seconds form only); None when absent or odd."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


class RemoteFakeAdapter(FakeAdapter):
    """Drive a fake provider server (``chaos.provider``) through the adapter port.

    Parameters
    ----------
    name : str
        The provider's name in the gateway's configuration.
    base_url : str
        The fake server's root, e.g. ``"http://127.0.0.1:8099"``.
    secret : str
        The HMAC key its webhooks are signed with.
    request_timeout_s : float
        Timeout of each HTTP call, in seconds.
    fetch_interval_s, fetch_max_interval_s : float
        Poll intervals advertised in the capabilities, in seconds.
    transport : httpx.AsyncBaseTransport or None
        For tests (``httpx.MockTransport``); None uses the network.
    ca_file : str or None
        PEM file of CA certificates trusted as well (a private CA).
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        secret: str,
        request_timeout_s: float = 10.0,
        fetch_interval_s: float = 1.0,
        fetch_max_interval_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        super().__init__(
            name=name, secret=secret,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
        )
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=request_timeout_s, transport=transport,
            verify=tls.client_context(ca_file=ca_file),
        )

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """``POST /jobs`` with the gateway's job id (a retry is answered, not run again)."""
        body = {"id": request.job_id, "input": request.input, "webhook": request.webhook_url}
        with self._errors("submit"):
            response = await self._client.post("/jobs", json=body)
        return self._job(response, "submit")

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """``GET /jobs/{id}``; an unknown job is ``FAILED`` with ``lost=True``."""
        with self._errors("fetch"):
            response = await self._client.get(f"/jobs/{ref.provider_job_id}")
        if response.status_code == 404:
            return ProviderSnapshot(
                provider_job_id=ref.provider_job_id, state=JobState.FAILED,
                raw_status="lost", error="the fake provider does not know this job", lost=True,
            )
        return self._job(response, "fetch")

    async def cancel(self, ref: ProviderRef) -> bool:
        """``POST /jobs/{id}/cancel``; True when the job was still active."""
        with self._errors("cancel"):
            response = await self._client.post(f"/jobs/{ref.provider_job_id}/cancel")
        if response.status_code == 404:
            return False
        self._raise_for(response, "cancel")
        try:
            return bool(response.json().get("canceled"))
        except (ValueError, AttributeError) as exc:
            raise ContractViolation(f"{self.name}: cancel answer is not JSON") from exc

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
        await super().aclose()

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            why = tls.verify_failure(exc) or f"cannot connect ({type(exc).__name__})"
            raise UpstreamUnreachable(f"{self.name}: {what}: {why}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamRetryable(f"{self.name}: {what} failed ({type(exc).__name__})") from exc

    def _raise_for(self, response: httpx.Response, what: str) -> None:
        code = response.status_code
        if code in _BUSY_CODES:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise ProviderBusy(f"{self.name}: {what} answered {code}", retry_after)
        if code >= 500:
            raise UpstreamRetryable(f"{self.name}: {what} answered {code}")
        if code >= 400:
            raise UpstreamRejected(f"{self.name}: {what} refused with {code}")

    def _job(self, response: httpx.Response, what: str) -> ProviderSnapshot:
        self._raise_for(response, what)
        try:
            return _Job.model_validate_json(response.content).snapshot()
        except ValidationError as exc:
            raise ContractViolation(f"{self.name}: malformed {what} answer") from exc
