"""Adapter for a self-hosted Cog server (the real server is coglet 0.23.1).

Facts this module relies on (../shared/specs/providers.md §1):

- Submit is ``PUT /predictions/{id}`` with ``Prefer: respond-async`` and the gateway's
  job id as the prediction id (§1.12 point 1). It answers 202 ``{"id", "status":
  "starting"}`` (§1.4), 409 when every slot is busy and 503 before setup finished
  (§1.4, §1.11): both mean "not started, try later" (§1.12 point 2). 422 carries
  ``{"detail": [{"loc", "msg", "type"}]}`` (§1.3).
- Statuses: ``starting -> processing -> succeeded | failed | canceled`` (§1.5). The one
  mapping table is :data:`STATUS_MAP`; a status outside it is kept as ``raw_status`` and
  treated as ``running`` (non-terminal), so an unexpected word from a newer server can
  never finish a job by itself: the terminal event or the watchdog decides.
- Webhooks carry the snapshot ``{"id", "status", "logs", "output"?, "error"?,
  "metrics"}``; intermediate ``output`` events carry the *array* of outputs so far,
  the terminal one the final value (§1.5). Cog filters events strictly, so
  ``completed`` is always in the filter we send (§1.9). Cog signs nothing; the only
  shared secret is an optional ``Authorization: Bearer $WEBHOOK_AUTH_TOKEN`` (§1.9, §7).
- There is no ``GET /predictions/{id}`` (405, §1.2). :meth:`CogAdapter.fetch` is the
  watchdog probe of §1.12 point 3: the same ``PUT`` again.
- Cancel: 200 ``{}`` when the id is in flight (a request, not an outcome), 404 otherwise
  (§1.7).

What the ``PUT`` probe returns, observed on coglet 0.23.1 (one slot, the echo model in
``examples/echo``, probes sent with ``Prefer: respond-async``):

(a) while the prediction runs: 202 with its snapshot, ``input`` included, e.g.
    ``{"id", "input": {...}, "logs": "step 1/4\\n", "metrics": {}, "status":
    "processing"}``, in about a millisecond. A different input, a missing webhook or a
    missing ``Prefer`` header in the probe change nothing: the body is ignored, and the
    webhook given at submit keeps firing.
(b) while it is in flight but not yet picked up by the worker (it holds the only slot):
    202 with the same shape and ``"status": "starting"``, ``input`` included. Never 409:
    the in-flight lookup comes before the capacity check.
(c) after it finished (the id is forgotten): 202 ``{"id", "status": "starting"}`` with
    no ``input``, no ``logs``, no ``metrics``; the model **runs again** with the probe's
    input, and its events go to the probe's webhook. A cancel right after gets 200 and
    the rerun ends ``canceled`` at once.
(d) after it finished, while another prediction holds the only slot: 409 ``{"error":
    "At capacity - all prediction slots busy", "status": "failed"}``, nothing started.

So the probe reads "202 without ``input``" (c) and "409" (d) as *lost*, cancels the rerun
of (c) at once, and reports ``FAILED`` with ``lost=True``. It sends **no webhook**: a
rerun's ``start`` and ``canceled`` events would otherwise reach the gateway's intake for
the job and race the lost verdict with a ``canceled`` nobody asked for. Caveats, also
observed: concurrent ``PUT``s within milliseconds of a prediction's creation or end
sometimes got 409 (10 of 160), a window the watchdog, probing long after the submit's 202,
stays out of; and webhooks are sent concurrently, so a non-terminal event can arrive
*after* the terminal one (3 times in about 45 predictions). "Lost" means Cog forgot the
prediction, not that its terminal webhook will never come: Cog may still be retrying it
(§1.9, about 7 minutes), so the gateway should not finalize "lost" before that window.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.errors import (
    ContractViolation,
    CutoverError,
    ProviderBusy,
    UpstreamRejected,
    UpstreamRetryable,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["EVENTS_FILTER", "LOST_ERROR", "STATUS_MAP", "CogAdapter", "map_status"]

_log = logging.getLogger(__name__)

#: Cog's raw status -> canonical state (§1.5, §6). Anything else: see :func:`map_status`.
STATUS_MAP: Mapping[str, JobState] = {
    "starting": JobState.QUEUED,
    "processing": JobState.RUNNING,
    "succeeded": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "canceled": JobState.CANCELED,
}

#: Every event; ``completed`` must stay in it or Cog sends no terminal webhook (§1.9).
EVENTS_FILTER = ("start", "output", "logs", "completed")

LOST_ERROR = "the provider no longer knows this prediction; its outcome was lost"

_RESPOND_ASYNC = {"Prefer": "respond-async"}
_BUSY_CODES = frozenset({409, 429, 503})  # at capacity, too many streams, setup unfinished
_BODY_EXCERPT_CHARS = 200


def map_status(raw_status: str) -> JobState:
    """Canonical state of a Cog status (§1.5); an unknown status is ``RUNNING``.

    Unknown words are deliberately non-terminal: only a known terminal status, or the
    watchdog's lost verdict, may end a job.
    """
    return STATUS_MAP.get(raw_status, JobState.RUNNING)


class _CogPrediction(BaseModel):
    """A prediction as Cog serialises it in responses and webhooks (§1.5)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1)
    status: str = Field(min_length=1)
    input: Any = None  # only in PUT answers about an in-flight prediction
    output: Any = None
    logs: str | None = None
    error: str | None = None
    metrics: dict[str, Any] | None = None

    def snapshot(self) -> ProviderSnapshot:
        return ProviderSnapshot(
            provider_job_id=self.id,
            state=map_status(self.status),
            raw_status=self.status,
            output=self.output,
            logs=self.logs,
            error=self.error,
            metrics=self.metrics or {},
        )

    @property
    def created_by_this_request(self) -> bool:
        """Cog's answer to a PUT that started the model: no ``input`` echoed (case c)."""
        return self.status == "starting" and "input" not in self.model_fields_set


class CogAdapter:
    """Drive one Cog HTTP server (coglet 0.23.1) through the adapter port.

    Parameters
    ----------
    name : str
        The provider's name in the gateway's configuration (used in errors and logs).
    base_url : str
        The Cog server's root, e.g. ``"http://127.0.0.1:5000"``.
    webhook_auth_token : str or None
        The ``WEBHOOK_AUTH_TOKEN`` the Cog server was started with; when set, webhooks
        must carry it as a bearer token (§1.9).
    request_timeout_s : float
        Timeout of each HTTP call, in seconds. Every call is asynchronous on Cog's side,
        so answers come in milliseconds.
    fetch_interval_s, fetch_max_interval_s : float
        First and largest interval, in seconds, between watchdog probes
        (:attr:`capabilities`).
    transport : httpx.AsyncBaseTransport or None
        For tests (``httpx.MockTransport``); None uses the network.
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        webhook_auth_token: str | None = None,
        request_timeout_s: float = 30.0,
        fetch_interval_s: float = 30.0,
        fetch_max_interval_s: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=True, fetch=True, cancel=True,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
        )
        self._token = webhook_auth_token
        self._timeout_s = request_timeout_s
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=request_timeout_s, transport=transport
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    # --- the port -----------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Start a prediction with the job's id: ``PUT /predictions/{job_id}`` (§1.6).

        Safe to retry while the prediction is in flight (Cog answers with its snapshot).

        Returns
        -------
        ProviderSnapshot
            Normally ``QUEUED`` (raw ``starting``), with ``provider_job_id == job_id``.

        Raises
        ------
        ProviderBusy
            409 (all slots busy), 503 (setup unfinished) or 429: nothing was started.
        UpstreamRejected
            422 (the detail lists Cog's complaints) and other 4xx.
        UpstreamRetryable
            5xx, timeout, connection failure, or a 2xx body that is not a prediction.
        """
        response = await self._put(request.job_id, request.input, request.webhook_url)
        _raise_for_status(self.name, "submit", response)
        return _prediction(self.name, response).snapshot()

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """Watchdog probe (§1.12 point 3): ``PUT`` the same id and input, no webhook.

        See the module docstring for what Cog answers in each case. ``ref.input`` should
        be the job's input: a rerun starts with it, and an image with a schema may answer
        422 to another.

        Returns
        -------
        ProviderSnapshot
            The in-flight snapshot, mapped as usual; or ``FAILED`` with ``lost=True``
            when Cog no longer knew the prediction (409, or a 202 that restarted it, in
            which case the rerun is canceled before returning).

        Raises
        ------
        ProviderBusy
            503: the server is not ready (e.g. restarting); probe again later.
        UpstreamRejected, UpstreamRetryable
            As for :meth:`submit`.
        """
        job_id = ref.provider_job_id
        response = await self._put(job_id, ref.input, None)
        if response.status_code == httpx.codes.CONFLICT:
            # (d): an in-flight id is answered before the capacity check, so ours is gone.
            return self._lost(job_id)
        _raise_for_status(self.name, "fetch", response)
        prediction = _prediction(self.name, response)
        if prediction.created_by_this_request:  # (c)
            await self._cancel_rerun(ref)
            return self._lost(job_id)
        return prediction.snapshot()

    async def _cancel_rerun(self, ref: ProviderRef) -> None:
        where = {"job_id": ref.provider_job_id, "provider": self.name}
        _log.warning(
            "the watchdog probe restarted a forgotten prediction; canceling it",
            extra={"event": "cog.probe_restarted", **where},
        )
        try:
            await self.cancel(ref)
        except CutoverError as exc:  # the verdict stands; the stray run is only logged
            _log.error(
                "could not cancel the prediction the probe restarted",
                extra={"event": "cog.probe_cancel_failed", "error": exc.detail, **where},
            )

    async def cancel(self, ref: ProviderRef) -> bool:
        """``POST /predictions/{id}/cancel`` (§1.7).

        Returns
        -------
        bool
            True on 200 (requested; the terminal event decides), False on 404 (unknown or
            already finished).

        Raises
        ------
        UpstreamRejected, UpstreamRetryable
            Any other status, a timeout or a connection failure.
        """
        with self._errors("cancel", ref.provider_job_id):
            response = await self._client.post(_path(ref.provider_job_id) + "/cancel")
        if response.status_code == httpx.codes.NOT_FOUND:
            return False
        _raise_for_status(self.name, "cancel", response)
        return True

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Check ``Authorization: Bearer <webhook_auth_token>`` in constant time (§1.9).

        Without a configured token there is nothing to check (Cog signs nothing; the
        gateway's per-job URL token is checked elsewhere). Header names match in any case.

        Raises
        ------
        WebhookVerificationError
            The token is configured and the header is missing or different.
        """
        if self._token is None:
            return
        value = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        if value is None:
            raise WebhookVerificationError(f"{self.name}: webhook without Authorization")
        scheme, _, presented = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode(), self._token.encode()
        ):
            raise WebhookVerificationError(f"{self.name}: webhook bearer token does not match")

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """Parse a verified Cog webhook body (§1.5, §1.9) into a snapshot.

        ``output`` is passed through as sent: an array of the outputs so far while
        ``processing``, the final value once terminal. ``metrics.predict_time`` is in
        seconds and appears only on terminal events.

        Raises
        ------
        ContractViolation
            Not JSON, not an object, or ``id``/``status`` missing or not strings.
        """
        try:
            return _CogPrediction.model_validate_json(body).snapshot()
        except ValidationError as exc:
            problems = "; ".join(_describe(error) for error in exc.errors(include_url=False))
            raise ContractViolation(
                f"{self.name}: webhook body is not a Cog prediction: {problems}"
            ) from exc

    # --- HTTP -----------------------------------------------------------------------------

    async def _put(
        self, job_id: str, model_input: dict[str, Any], webhook: str | None
    ) -> httpx.Response:
        body: dict[str, Any] = {"id": job_id, "input": model_input}
        if webhook is not None:
            body["webhook"] = webhook
            body["webhook_events_filter"] = list(EVENTS_FILTER)
        with self._errors("put", job_id):
            return await self._client.put(_path(job_id), json=body, headers=_RESPOND_ASYNC)

    @contextlib.contextmanager
    def _errors(self, action: str, job_id: str) -> Iterator[None]:
        """The one place where httpx exceptions become :mod:`contracts.errors`."""
        try:
            yield
        except httpx.TimeoutException as exc:
            raise UpstreamRetryable(
                f"{self.name}: {action} {job_id} timed out after {self._timeout_s} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise UpstreamRetryable(
                f"{self.name}: {action} {job_id} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _lost(self, job_id: str) -> ProviderSnapshot:
        return ProviderSnapshot(
            provider_job_id=job_id,
            state=JobState.FAILED,
            raw_status="lost",
            error=LOST_ERROR,
            lost=True,
        )


def _path(job_id: str) -> str:
    return "/predictions/" + urllib.parse.quote(job_id, safe="")


def _raise_for_status(name: str, action: str, response: httpx.Response) -> None:
    """Map a Cog error status to the error tree (§1.4); 2xx passes."""
    code = response.status_code
    if code < 300:
        return
    what = f"{name}: {action} answered {code}"
    if code in _BUSY_CODES:
        raise ProviderBusy(f"{what} (not started, try later): {_excerpt(response)}")
    if code == httpx.codes.UNPROCESSABLE_ENTITY:
        raise UpstreamRejected(f"{what}: {_validation_detail(response)}")
    if code < 500:  # other 4xx, and redirects (a misconfigured base_url)
        raise UpstreamRejected(f"{what}: {_excerpt(response)}")
    raise UpstreamRetryable(f"{what}: {_excerpt(response)}")


def _prediction(name: str, response: httpx.Response) -> _CogPrediction:
    try:
        return _CogPrediction.model_validate_json(response.content)
    except ValidationError as exc:
        raise UpstreamRetryable(
            f"{name}: answered {response.status_code} with a body that is not a prediction: "
            f"{_excerpt(response)}"
        ) from exc


def _validation_detail(response: httpx.Response) -> str:
    """``input.prompt: field required; ...`` from Cog's 422 body (§1.3)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return _excerpt(response)
    if isinstance(detail, str):
        return detail
    if not isinstance(detail, list) or not detail:
        return _excerpt(response)
    return "; ".join(_describe(item) for item in detail)


def _describe(item: Any) -> str:
    """One validation complaint (Cog's or pydantic's) as ``where: what``."""
    if not isinstance(item, Mapping):
        return str(item)
    loc = [str(part) for part in item.get("loc") or () if part != "body"]
    msg = str(item.get("msg", "invalid"))
    return f"{'.'.join(loc)}: {msg}" if loc else msg


def _excerpt(response: httpx.Response) -> str:
    text = response.text.strip()
    if len(text) > _BODY_EXCERPT_CHARS:
        text = text[:_BODY_EXCERPT_CHARS] + "..."
    return text or "(empty body)"
