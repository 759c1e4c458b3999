"""Adapter for fal's queue API (docs/providers.md, "fal").

Wire format:

- Submit: ``POST {base}/{app id}?fal_webhook=<url>`` with the model input as the body and
  ``Authorization: Key $FAL_KEY``; the answer carries ``request_id`` (status
  ``IN_QUEUE``). No idempotent submit exists, so a create that fails after it was sent
  is not retried (see :mod:`adapters.transport`).
- Status: ``GET {base}/{owner}/{app}/requests/{id}/status?logs=true`` (the app id's
  sub-path dropped) -> ``IN_QUEUE`` | ``IN_PROGRESS`` | ``COMPLETED``, mapped by
  :data:`STATUS_MAP`. ``COMPLETED`` is the only terminal word and covers success,
  failure and cancel alike: it is resolved only by reading the result, at once (results
  expire after 1 h, 6 min when >= 10 KB).
- Result: ``GET {base}/{owner}/{app}/requests/{id}`` answers with the model's own status:
  2xx -> succeeded, 499 -> canceled, a 4xx with fal's ``detail`` (422) -> failed
  ``model_refused`` with the detail (its echoed ``input`` dropped), 401/403 -> failed
  ``gateway_credentials`` (logged as ``provider_credentials_refused``). 429, 5xx,
  404/410, a 4xx without ``detail`` or no connection raise ``OutcomeUnreadable``: the
  poller reads again with backoff (``Retry-After`` honoured) for
  ``result_retry_window_s``, then fails the job ``provider_fault``. A status carrying
  ``error`` ("Invalid status code: 422") still reads the result, for fal's own message.
- Cancel: ``PUT .../requests/{id}/cancel`` -> ``CANCELLATION_REQUESTED`` (True) or
  ``ALREADY_COMPLETED`` / ``NOT_FOUND`` (False). A request, never an outcome.
- Webhooks: one POST on completion, ``{"request_id", "status": "OK"|"ERROR", "payload",
  "error", "payload_error"}``, Ed25519-signed (:mod:`adapters.fal_webhook`). With
  ``payload_error`` the output was not JSON-serialisable: the snapshot stays running and
  the next fetch reads the result.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters import errortext, fal_webhook, transport
from contracts.errors import (
    ContractViolation,
    OutcomeUnreadable,
    UpstreamRejected,
    UpstreamRetryable,
)
from contracts.job import JobState
from contracts.snapshot import (
    Capabilities,
    ErrorClass,
    ProviderRef,
    ProviderSnapshot,
    SubmitRequest,
)

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_RESULT_RETRY_WINDOW_S", "STATUS_MAP", "FalAdapter",
           "map_status"]

DEFAULT_BASE_URL = "https://queue.fal.run"
EXPIRED_ERROR = (
    "fal no longer has this result (it keeps results 1 hour, 6 minutes when 10 KB or more)"
)
DEFAULT_RESULT_RETRY_WINDOW_S = 300.0
_AUTH_CODES = (401, 403)
_STATUS_ALLOW = (401, 403, 404, 410)
#: 4xx result answers that are no refusal: read again (not there yet, or a blip).
_REREAD_4XX = frozenset({404, 408, 410, 425, 429})
_log = logging.getLogger(__name__)

#: fal's raw status -> canonical state. ``COMPLETED`` is provisional: the result decides.
#: ``FAILED`` and ``CANCELED`` are not documented but appear in third-party schemas.
STATUS_MAP: Mapping[str, JobState] = {
    "IN_QUEUE": JobState.QUEUED,
    "IN_PROGRESS": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELED": JobState.CANCELED,
    "CANCELLED": JobState.CANCELED,
}


def map_status(raw: str) -> JobState:
    """Canonical state of a fal status; an unknown word is ``RUNNING`` (never terminal)."""
    state = STATUS_MAP.get(raw)
    if state is None:
        _log.warning("unknown fal status", extra={"event": "fal.unknown_status", "raw": raw})
        return JobState.RUNNING
    return state


class _Submitted(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    request_id: str = Field(min_length=1)
    status: str = "IN_QUEUE"


class _Status(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    status: str = Field(min_length=1)
    queue_position: int | None = None
    logs: list[Any] | None = None
    error: str | None = None
    error_type: str | None = None
    metrics: dict[str, Any] | None = None


class _Webhook(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    request_id: str = Field(min_length=1)
    status: str = Field(min_length=1)
    payload: Any = None
    error: str | None = None
    payload_error: str | None = None


def _logs(status: _Status) -> str | None:
    lines = [
        str(item.get("message", "")) if isinstance(item, Mapping) else str(item)
        for item in status.logs or []
    ]
    if status.queue_position is not None:
        lines.append(f"queue position {status.queue_position}")
    return "\n".join(lines) or None


class FalAdapter:
    """Drive fal's queue through the adapter port.

    Parameters
    ----------
    name : str
        The provider's configured name.
    token : str or None
        ``FAL_KEY`` (``Authorization: Key <token>``); public apps accept none.
    base_url : str
        The queue host (``https://queue.fal.run``).
    jwks_url : str
        Where fal publishes its webhook keys.
    request_timeout_s, fetch_interval_s, fetch_max_interval_s, rate_limit_per_s
        Call timeout; first and largest poll interval; requests per second (None: none).
    result_retry_window_s : float
        Seconds a result read failing after ``COMPLETED`` is retried (then ``provider_fault``).
    clock : callable or None
        Unix seconds for the signature window (tests).
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
        jwks_url: str = fal_webhook.DEFAULT_JWKS_URL,
        request_timeout_s: float = 30.0,
        fetch_interval_s: float = 2.0,
        fetch_max_interval_s: float = 30.0,
        rate_limit_per_s: float | None = None,
        result_retry_window_s: float = DEFAULT_RESULT_RETRY_WINDOW_S,
        clock: Any = None,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=True, fetch=True, cancel=True,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
        )
        self._http = _upstream(name, base_url, token, request_timeout_s, rate_limit_per_s,
                               transport, ca_file)
        self._jwks_url = jwks_url
        self._result_window_s = result_retry_window_s
        extra = {"clock": clock} if clock is not None else {}
        self._keys = fal_webhook.JwksCache(self._fetch_jwks, **extra)

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the port ---------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """``POST /{app id}`` with the input; ``QUEUED`` with fal's ``request_id``.

        Raises ``ProviderBusy`` (429), ``UpstreamRetryable`` (5xx, cannot connect),
        ``UpstreamRejected`` (4xx, an unreadable answer, a failure after sending).
        """
        app = _app_id(self.name, request.target)
        params = {"fal_webhook": request.webhook_url} if request.webhook_url else None
        submitted = await self._http.create(
            "submit", "POST", "/" + app, _Submitted, json=request.input, params=params
        )
        return ProviderSnapshot(
            provider_job_id=submitted.request_id, state=JobState.QUEUED,
            raw_status=submitted.status,
        )

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """The status, and for ``COMPLETED`` the result (see the module docstring).

        A body that is not a fal status fails the job with a readable error; a 401/403
        fails it as ``gateway_credentials``.

        Raises
        ------
        OutcomeUnreadable
            ``COMPLETED``, but the result read answered 429, 5xx, 404/410, another 4xx
            without a ``detail``, or did not connect: read again later.
        """
        base = _requests_path(self.name, ref)
        response = await self._http.request("status", "GET", base + "/status",
                                            params={"logs": "true"}, allow=_STATUS_ALLOW)
        if response.status_code in _AUTH_CODES:
            return self._credentials(ref, "status", response)
        if response.status_code in (404, 410):
            return self._failed(ref, "expired", EXPIRED_ERROR)
        try:
            status = transport.parse(self.name, "status", response, _Status)
        except ContractViolation as exc:
            return self._failed(ref, "unreadable", exc.detail)
        state = map_status(status.status)
        if status.error or state is JobState.COMPLETED:  # the result has fal's own words
            return await self._result(ref, base, status)
        return ProviderSnapshot(
            provider_job_id=ref.provider_job_id, state=state, raw_status=status.status,
            logs=_logs(status), error=None, metrics=status.metrics or {},
        )

    async def _result(self, ref: ProviderRef, base: str, status: _Status) -> ProviderSnapshot:
        try:
            response = await self._http.call("result", "GET", base)
        except UpstreamRetryable as exc:  # could not connect, timed out, dropped
            raise self._unreadable(ref, status, exc.detail, exc.retry_after_s) from exc
        code = response.status_code
        if code < 300 and status.error:  # the status says it failed: trust that
            return self._failed(ref, "COMPLETED(error)", errortext.one_line(
                f"{self.name}: provider fault: the status reports {_status_error(status)}"
                " but the result read answered 2xx"), ErrorClass.PROVIDER_FAULT)
        if code < 300:
            try:
                output = transport.json_body(self.name, "result", response)
            except ContractViolation as exc:
                return self._failed(ref, "unreadable", exc.detail)
            return ProviderSnapshot(
                provider_job_id=ref.provider_job_id, state=JobState.COMPLETED,
                raw_status="COMPLETED", output=output, logs=_logs(status),
                metrics=_metrics(status),
            )
        if code == 499:
            return ProviderSnapshot(provider_job_id=ref.provider_job_id,
                                    state=JobState.CANCELED, raw_status="COMPLETED(499)")
        if code in _AUTH_CODES:
            return self._credentials(ref, "result", response)
        detail = _detail(response)
        if 400 <= code < 500 and code not in _REREAD_4XX and detail is not None:
            return self._failed(ref, f"COMPLETED({code})", errortext.one_line(
                f"{self.name}: the model refused the input: {detail}"),
                ErrorClass.MODEL_REFUSED)
        text = detail or transport.excerpt(response.content)
        retry_after = transport.parse_retry_after(response.headers.get("retry-after"))
        raise self._unreadable(ref, status, f"{self.name}: result answered {code}: {text}",
                               retry_after)

    def _unreadable(self, ref: ProviderRef, status: _Status, why: str,
                    retry_after_s: float | None) -> OutcomeUnreadable:
        """A failed result read after ``COMPLETED``: read again, for ``result_retry_window_s``."""
        why = errortext.one_line(why, 600)
        said = f"; the status reported {_status_error(status)}" if status.error else ""
        final = self._failed(ref, "COMPLETED(unread)", errortext.one_line(
            f"{self.name}: provider fault: the result could not be read for "
            f"{self._result_window_s:g} s after COMPLETED (last: {why}){said}"),
            ErrorClass.PROVIDER_FAULT)
        return OutcomeUnreadable(why, final=final, window_s=self._result_window_s,
                                 retry_after_s=retry_after_s)

    def _credentials(self, ref: ProviderRef, action: str,
                     response: httpx.Response) -> ProviderSnapshot:
        code = response.status_code  # the finalizer raises the operator alert
        return self._failed(ref, f"{action}({code})", errortext.one_line(
            f"{self.name}: the provider refused the gateway's credentials ({action} answered "
            f"{code}: {_detail(response) or transport.excerpt(response.content)}); the "
            "operator must check the provider's token"), ErrorClass.GATEWAY_CREDENTIALS)

    async def cancel(self, ref: ProviderRef) -> bool:
        """``PUT .../cancel``; True for ``CANCELLATION_REQUESTED`` (or ``OK``)."""
        response = await self._http.call(
            "cancel", "PUT", _requests_path(self.name, ref) + "/cancel"
        )
        try:
            body = transport.json_body(self.name, "cancel", response)
        except ContractViolation:
            body = {}
        word = body.get("status") if isinstance(body, Mapping) else None
        if word in ("ALREADY_COMPLETED", "NOT_FOUND") or response.status_code == 404:
            return False
        self._http.raise_for_status("cancel", response)
        return True

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Ed25519 against fal's JWKS (:mod:`adapters.fal_webhook`)."""
        await self._keys.verify(headers, body)

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """A verified completion webhook as a snapshot (``ContractViolation`` if malformed)."""
        try:
            event = _Webhook.model_validate_json(body)
        except ValidationError as exc:
            raise ContractViolation(
                f"{self.name}: webhook body is not a fal event: {transport.describe(exc)}"
            ) from exc
        pid = event.request_id
        if event.status == "OK" and event.payload_error is None:
            return ProviderSnapshot(provider_job_id=pid, state=JobState.COMPLETED,
                                    raw_status="OK", output=event.payload)
        if event.status == "OK":  # the output could not travel: the next fetch reads it
            return ProviderSnapshot(provider_job_id=pid, state=JobState.RUNNING,
                                    raw_status="OK(payload_error)")
        error = event.error or "the model failed"
        detail = event.payload.get("detail") if isinstance(event.payload, Mapping) else None
        if "499" in error:
            return ProviderSnapshot(provider_job_id=pid, state=JobState.CANCELED,
                                    raw_status="ERROR(499)")
        if detail:
            text = f"{self.name}: the model refused the input: {errortext.fal_detail(detail)}"
        else:
            text = f"{self.name}: {error}"
        kind = ErrorClass.MODEL_REFUSED if detail and "Invalid status code: 4" in error else None
        return ProviderSnapshot(provider_job_id=pid, state=JobState.FAILED, raw_status="ERROR",
                                error=errortext.one_line(text), error_class=kind)

    # --- helpers ------------------------------------------------------------------------

    async def _fetch_jwks(self) -> Any:
        response = await self._http.request("jwks", "GET", self._jwks_url)
        try:
            return transport.json_body(self.name, "jwks", response)
        except ContractViolation as exc:
            raise UpstreamRetryable(exc.detail) from exc

    @staticmethod
    def _failed(ref: ProviderRef, raw: str, error: str,
                error_class: ErrorClass | None = None) -> ProviderSnapshot:
        return ProviderSnapshot(provider_job_id=ref.provider_job_id, state=JobState.FAILED,
                                raw_status=raw, error=error, error_class=error_class)


def _upstream(
    name: str, base_url: str, token: str | None, timeout_s: float,
    rate_limit_per_s: float | None, mock: httpx.AsyncBaseTransport | None,
    ca_file: str | None = None,
) -> transport.Upstream:
    headers = {"Authorization": f"Key {token}"} if token else {}
    return transport.Upstream(
        name=name, base_url=base_url or DEFAULT_BASE_URL, headers=headers, timeout_s=timeout_s,
        rate_limit_per_s=rate_limit_per_s, transport=mock, ca_file=ca_file,
    )


def _app_id(name: str, target: str | None) -> str:
    parts = [p for p in (target or "").split("/") if p]
    if len(parts) < 2:
        raise UpstreamRejected(
            f"{name}: the route's target must be a fal app id like 'fal-ai/fast-sdxl', "
            f"got {target!r}"
        )
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def _requests_path(name: str, ref: ProviderRef) -> str:
    owner, app = _app_id(name, ref.target).split("/")[:2]
    return f"/{owner}/{app}/requests/{urllib.parse.quote(ref.provider_job_id, safe='')}"


def _metrics(status: _Status) -> dict[str, Any]:
    metrics = dict(status.metrics or {})
    if "inference_time" in metrics and "predict_time" not in metrics:
        metrics["predict_time"] = metrics["inference_time"]
    return metrics


def _detail(response: httpx.Response) -> str | None:
    """fal's ``detail`` (a string, or a list of field errors) in fal's words, without
    the echoed input (:func:`adapters.errortext.fal_detail`)."""
    try:
        body = response.json()
    except ValueError:
        return None
    detail = body.get("detail") if isinstance(body, Mapping) else None
    return errortext.one_line(errortext.fal_detail(detail), 800) if detail else None


def _status_error(status: _Status) -> str:
    kind = f" ({status.error_type})" if status.error_type else ""
    return f"{status.error}{kind}"
