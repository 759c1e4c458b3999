"""Adapter for a self-hosted Cog server (the real server is coglet 0.23.1).

What it relies on is written down, with what was observed on the real server, in
docs/cog.md; the section numbers below (§1.N) are that page's. In short: submit is an
idempotent ``PUT /predictions/{job id}`` with ``Prefer: respond-async`` (§1.12); 409,
429 and 503 mean "not started, try later" (§1.4); statuses map through
:data:`STATUS_MAP` (§1.5), an unknown one reading as ``running`` so that a strange word
never ends a job; webhooks carry the snapshot and, when configured, a bearer token
(§1.9); there is no ``GET`` of a prediction (§1.2), so :meth:`CogAdapter.fetch` is the
watchdog probe of docs/cog.md §2: a ``PUT`` again, with :data:`PROBE_INPUT` and no
webhook, which never runs the model again and reads a forgotten prediction as *lost*.
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from adapters import aiotransport, cog_wire, tls
from adapters.aiotransport import AiohttpTransport
from adapters.cog_wire import PROBE_INPUT, STATUS_MAP, map_status
from contracts.auth import bearer_token, same_secret
from contracts.errors import (
    ContractViolation,
    CutoverError,
    UpstreamRejected,
    UpstreamRetryable,
    UpstreamUnreachable,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.replicate import WebhookEvent
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = [
    "LOST_ERROR", "PROBE_INPUT", "RESTART_ERROR", "STATUS_MAP", "CogAdapter", "map_status",
]

# Cog retries a terminal webhook 12 times, 0.1 s x 2^n apart capped at 102.4 s, each
# attempt timing out after 30 s (§1.9): about 7 minutes in all. A prediction
# the probe finds forgotten may still be reported within that window.
TERMINAL_RETRY_WINDOW_S = 480.0

_log = logging.getLogger(__name__)

LOST_ERROR = "the provider no longer knows this prediction; its outcome was lost"
RESTART_ERROR = "the provider restarted while the prediction ran; its outcome was lost"

_RESPOND_ASYNC = {"Prefer": "respond-async"}
_NO_SCHEMA = (
    "this Cog server has no OpenAPI schema (one started from predict.py has none unless "
    ".cog/openapi_schema.json exists; `cog build` writes it): give the route's "
    "openapi_schema inline or as a JSON file instead of \"provider\", or leave it out"
)
_HINT = " (start Cog with WEBHOOK_AUTH_TOKEN set to this provider's webhook_auth_token)"



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
        For tests (``httpx.MockTransport``); None uses the network through
        :class:`adapters.aiotransport.AiohttpTransport`.
    ca_file : str or None
        PEM file of CA certificates trusted besides ``SSL_CERT_FILE`` /
        ``SSL_CERT_DIR`` (the Cog environment rule), else certifi's.
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
        lost_grace_s: float = TERMINAL_RETRY_WINDOW_S,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=True, fetch=True, cancel=True,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
            lost_grace_s=lost_grace_s, lost_is_idle=True,
        )
        self._token = webhook_auth_token
        self._timeout_s = request_timeout_s
        context = tls.client_context(ca_file=ca_file)
        # the network through aiohttp's client: a fifth of httpx's own CPU per request
        self._base_url = base_url.rstrip("/")
        self._transport = transport or AiohttpTransport(ssl_context=context)
        self._client = httpx.AsyncClient(
            base_url=self._base_url, timeout=request_timeout_s, transport=self._transport,
            verify=context,
        )
        # the PUT's headers, as the client would send them (aiotransport.send)
        self._put_headers = [*self._client.headers.items(), *_RESPOND_ASYNC.items(),
                             ("Content-Type", "application/json")]

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
        cog_wire.raise_for_status(self.name, "submit", response)
        return cog_wire.prediction(self.name, response).snapshot()

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """Watchdog probe (§1.12 point 3): ``PUT`` the same id, :data:`PROBE_INPUT`, no webhook.

        See the module docstring for what Cog answers, and why the job's input is not sent.

        Returns
        -------
        ProviderSnapshot
            The in-flight snapshot, mapped as usual; or ``FAILED`` with ``lost=True``
            when Cog no longer knew the prediction.

        Raises
        ------
        ProviderBusy
            503: the server is not ready (e.g. restarting); probe again later.
        UpstreamRejected, UpstreamRetryable
            As for :meth:`submit`.
        """
        job_id = ref.provider_job_id
        response = await self._put(job_id, PROBE_INPUT, None)
        code = response.status_code
        if code == httpx.codes.CONFLICT or (
            code == httpx.codes.UNPROCESSABLE_ENTITY and cog_wire.refuses_input(response)
        ):
            # (d), or (c) with a schema
            return self._lost(job_id, "probe refused", await self._restarted_since(ref))
        cog_wire.raise_for_status(self.name, "fetch", response)
        try:
            prediction = cog_wire.prediction(self.name, response)
        except UpstreamRetryable as exc:  # a 2xx that is not a prediction: fail, readably
            return ProviderSnapshot(provider_job_id=job_id, state=JobState.FAILED,
                                    raw_status="unreadable", error=exc.detail)
        if not prediction.forgotten:
            return prediction.snapshot()
        with contextlib.suppress(CutoverError):  # a safety net: it fails on its own
            await self.cancel(ref)
        return self._lost(job_id, "probe created", await self._restarted_since(ref))

    async def _restarted_since(self, ref: ProviderRef) -> bool:
        """Whether the server set itself up again after ``ref`` was submitted (§1.8:
        ``/health-check`` reports ``setup.started_at``). A restarted Cog has forgotten
        its in-flight predictions for good and will never send their webhooks. Any doubt
        (no submission time, no answer, no timestamp) answers False."""
        if ref.submitted_at is None:
            return False
        try:
            response = await self._client.get("/health-check")
            started = cog_wire.parse_timestamp(response.json()["setup"]["started_at"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False
        return started is not None and started > ref.submitted_at

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
            response = await self._client.post(prediction_path(ref.provider_job_id) + "/cancel")
        if response.status_code == httpx.codes.NOT_FOUND:
            return False
        cog_wire.raise_for_status(self.name, "cancel", response)
        return True

    async def model_schema(self, target: str | None = None) -> dict[str, Any]:
        """The model's OpenAPI document, ``GET /openapi.json`` (a built image serves its
        ``Input`` and ``Output`` schemas there; docs/validation.md).

        Raises
        ------
        UpstreamRejected, UpstreamRetryable
            A non-200 answer, a body that is not a JSON object, or a transport failure.
        """
        with self._errors("openapi", "-"):
            response = await self._client.get("/openapi.json")
        if response.status_code == httpx.codes.SERVICE_UNAVAILABLE and (
            b"schema not available" in response.content
        ):  # a server run from predict.py without .cog/openapi_schema.json: none to read
            raise UpstreamRejected(f"{self.name}: {_NO_SCHEMA}")
        cog_wire.raise_for_status(self.name, "openapi", response)
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise UpstreamRejected(f"{self.name}: /openapi.json is not a JSON object")
        return document

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """The port's check: :meth:`check_bearer` (Cog signs no body)."""
        self.check_bearer(headers)

    def check_bearer(self, headers: Mapping[str, str]) -> None:
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
            raise WebhookVerificationError(f"{self.name}: webhook without Authorization{_HINT}")
        if not same_secret(bearer_token(value), self._token):
            raise WebhookVerificationError(
                f"{self.name}: webhook bearer token does not match{_HINT}"
            )

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
            return cog_wire.CogPrediction.model_validate_json(body).snapshot()
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            problems = "; ".join(cog_wire.describe(error) for error in errors)
            raise ContractViolation(
                f"{self.name}: webhook body is not a Cog prediction: {problems}"
            ) from exc

    # --- HTTP -----------------------------------------------------------------------------

    async def _put(self, job_id: str, model_input: Any, webhook: str | None) -> httpx.Response:
        body: dict[str, Any] = {"id": job_id, "input": model_input}
        if webhook is not None:
            body["webhook"] = webhook
            # Every event: without ``completed`` Cog sends no terminal webhook (§1.9).
            body["webhook_events_filter"] = [event.value for event in WebhookEvent]
        with self._errors("put", job_id):  # the hot path: without httpx's client layer
            return await aiotransport.send(
                self._transport, "PUT", self._base_url + prediction_path(job_id),
                content=aiotransport.json_body(body), headers=self._put_headers,
                limits=self._client.timeout,
            )

    @contextlib.contextmanager
    def _errors(self, action: str, job_id: str) -> Iterator[None]:
        """The one place where httpx exceptions become :mod:`contracts.errors`."""
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            why = tls.verify_failure(exc) or f"cannot connect ({type(exc).__name__})"
            raise UpstreamUnreachable(f"{self.name}: {action} {job_id}: {why}") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamRetryable(
                f"{self.name}: {action} {job_id} timed out after {self._timeout_s} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise UpstreamRetryable(
                f"{self.name}: {action} {job_id} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _lost(self, job_id: str, how: str, restarted: bool = False) -> ProviderSnapshot:
        _log.warning(
            "Cog no longer knows this prediction",
            extra={"event": "cog.prediction_lost", "job_id": job_id, "provider": self.name,
                   "how": how, "restarted": restarted},
        )
        return ProviderSnapshot(
            provider_job_id=job_id, state=JobState.FAILED, raw_status="lost",
            error=RESTART_ERROR if restarted else LOST_ERROR, lost=True,
            provider_restarted=restarted,
        )


def prediction_path(job_id: str) -> str:
    """``/predictions/{job_id}``, the id percent-encoded (§1.6)."""
    return "/predictions/" + urllib.parse.quote(job_id, safe="")
