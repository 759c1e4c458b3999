"""An in-memory provider for tests of the gateway: no sockets, fully scripted.

:class:`FakeAdapter` implements the adapter port. It records what the gateway asked of it,
answers with snapshots the test chose, and signs its webhooks with HMAC-SHA256 so that
forged-webhook tests have something to forge. Its provider job ids differ from the
gateway's (``fake-<job_id>``), so code that confuses the two fails loudly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.auth import same_secret
from contracts.errors import (
    CapabilityMissing,
    ContractViolation,
    ProviderBusy,
    UpstreamRejected,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["SIGNATURE_HEADER", "FakeAdapter"]

SIGNATURE_HEADER = "x-fake-signature"


class _FakeEvent(BaseModel):
    """The fake's webhook body (its own little wire format)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1)
    status: JobState
    output: Any = None
    logs: str | None = None
    error: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)


class FakeAdapter:
    """A scripted provider.

    Parameters
    ----------
    name : str
        The provider's name.
    secret : str
        Key of the HMAC-SHA256 (hex) that :meth:`verify_webhook` expects in the
        ``x-fake-signature`` header.
    busy_times : int
        The first ``busy_times`` submits raise ``ProviderBusy`` (the attribute counts down).
    reject : bool
        Every submit raises ``UpstreamRejected`` while True.
    webhooks, fetch, cancel : bool
        The advertised :class:`Capabilities`; ``fetch``/``cancel`` raise
        ``CapabilityMissing`` when switched off.
    fetch_interval_s, fetch_max_interval_s : float
        Poll intervals advertised in the capabilities, in seconds.

    Attributes
    ----------
    submitted : list of SubmitRequest
        Every accepted submit, in order (a retried submit appears again).
    cancel_calls : list of str
        The provider job id of every cancel call, accepted or not.
    fetch_calls : list of str
        The provider job id of every fetch call.
    closed : bool
        Whether :meth:`aclose` was called.
    """

    def __init__(
        self,
        *,
        name: str = "fake",
        secret: str = "fake-secret",  # noqa: S107 - a test key, not a credential
        busy_times: int = 0,
        reject: bool = False,
        webhooks: bool = True,
        fetch: bool = True,
        cancel: bool = True,
        fetch_interval_s: float = 1.0,
        fetch_max_interval_s: float = 30.0,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=webhooks,
            fetch=fetch,
            cancel=cancel,
            fetch_interval_s=fetch_interval_s,
            fetch_max_interval_s=fetch_max_interval_s,
        )
        self.busy_times = busy_times
        self.reject = reject
        self.submitted: list[SubmitRequest] = []
        self.cancel_calls: list[str] = []
        self.fetch_calls: list[str] = []
        self.closed = False
        self._secret = secret.encode()
        self._snapshots: dict[str, ProviderSnapshot] = {}

    # --- knobs for tests --------------------------------------------------------------------

    @staticmethod
    def provider_job_id(job_id: str) -> str:
        """The fake's id for the gateway's ``job_id``."""
        return f"fake-{job_id}"

    def set_state(
        self,
        job_id: str,
        state: JobState,
        output: Any = None,
        logs: str | None = None,
        error: str | None = None,
    ) -> ProviderSnapshot:
        """Make later fetches of ``job_id`` (the gateway's id) return this snapshot."""
        snapshot = ProviderSnapshot(
            provider_job_id=self.provider_job_id(job_id),
            state=state,
            raw_status=state.value,
            output=output,
            logs=logs,
            error=error,
        )
        self._snapshots[snapshot.provider_job_id] = snapshot
        return snapshot

    def forget(self, job_id: str) -> None:
        """Drop the job, so that fetch reports it lost (like Cog after completion)."""
        self._snapshots.pop(self.provider_job_id(job_id), None)

    def webhook_body(
        self,
        job_id: str,
        state: JobState,
        output: Any = None,
        logs: str | None = None,
        error: str | None = None,
    ) -> bytes:
        """A webhook body for ``job_id`` that :meth:`parse_webhook` accepts."""
        event = {
            "id": self.provider_job_id(job_id),
            "status": state.value,
            "output": output,
            "logs": logs,
            "error": error,
        }
        return json.dumps(event).encode()

    def sign(self, body: bytes) -> dict[str, str]:
        """Headers that make :meth:`verify_webhook` accept ``body``."""
        digest = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
        return {SIGNATURE_HEADER: digest}

    # --- the port -----------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Record the request; ``QUEUED`` first time, the current snapshot on a retry.

        Raises ``UpstreamRejected`` when :attr:`reject`, ``ProviderBusy`` while
        :attr:`busy_times` is positive.
        """
        if self.reject:
            raise UpstreamRejected(f"{self.name}: rejected {request.job_id} (reject=True)")
        if self.busy_times > 0:
            self.busy_times -= 1
            raise ProviderBusy(f"{self.name}: busy ({self.busy_times} more times)")
        self.submitted.append(request)
        known = self._snapshots.get(self.provider_job_id(request.job_id))
        return known or self.set_state(request.job_id, JobState.QUEUED)

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """The snapshot set last; ``FAILED`` with ``lost=True`` for an unknown job.

        Raises ``CapabilityMissing`` when the fetch capability is off.
        """
        if not self.capabilities.fetch:
            raise CapabilityMissing(f"{self.name}: fetch is switched off")
        self.fetch_calls.append(ref.provider_job_id)
        snapshot = self._snapshots.get(ref.provider_job_id)
        if snapshot is None:
            return ProviderSnapshot(
                provider_job_id=ref.provider_job_id,
                state=JobState.FAILED,
                raw_status="lost",
                error="the fake provider does not know this job",
                lost=True,
            )
        return snapshot

    async def cancel(self, ref: ProviderRef) -> bool:
        """Cancel an active job at once (True); False for unknown or terminal jobs.

        Raises ``CapabilityMissing`` when the cancel capability is off.
        """
        self.cancel_calls.append(ref.provider_job_id)
        if not self.capabilities.cancel:
            raise CapabilityMissing(f"{self.name}: cancel is switched off")
        snapshot = self._snapshots.get(ref.provider_job_id)
        if snapshot is None or snapshot.state.terminal:
            return False
        self._snapshots[ref.provider_job_id] = snapshot.model_copy(
            update={"state": JobState.CANCELED, "raw_status": JobState.CANCELED.value}
        )
        return True

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Require ``x-fake-signature`` = HMAC-SHA256 hex of ``body`` (any header case).

        Raises ``WebhookVerificationError`` when it is missing or wrong.
        """
        presented = next(
            (v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER), None
        )
        if presented is None:
            raise WebhookVerificationError(f"{self.name}: unsigned webhook")
        expected = self.sign(body)[SIGNATURE_HEADER]
        if not same_secret(presented, expected):
            raise WebhookVerificationError(f"{self.name}: webhook signature does not match")

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """Parse a body made by :meth:`webhook_body`; ``ContractViolation`` otherwise."""
        try:
            event = _FakeEvent.model_validate_json(body)
        except ValidationError as exc:
            raise ContractViolation(f"{self.name}: malformed webhook body") from exc
        return ProviderSnapshot(
            provider_job_id=event.id,
            state=event.status,
            raw_status=event.status.value,
            output=event.output,
            logs=event.logs,
            error=event.error,
            metrics=event.metrics,
        )

    async def aclose(self) -> None:
        """Mark the fake closed (it holds no resources)."""
        self.closed = True
