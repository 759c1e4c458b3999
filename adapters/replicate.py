"""Adapter for Replicate itself as an upstream (docs/providers.md, "Replicate").

Replicate is the control arm when providers are compared and the fallback of a canary.
Any server that speaks Replicate's HTTP API works, another cutover included: ``base_url``
is the root as the Python client takes it, without ``/v1``.

- Create: the route's ``target`` picks the endpoint:
  ``owner/name:version`` -> ``POST /v1/predictions`` ``{"version": <id>}``;
  ``owner/name`` -> ``POST /v1/models/owner/name/predictions``;
  ``deployments/owner/name`` -> ``POST /v1/deployments/owner/name/predictions``. Without
  a target, the route's own model and version (``hidden``: by model). Each create sends
  the gateway's webhook URL and every event in the filter. Creates are not idempotent:
  one that fails after it was sent is not retried.
- Inputs: a ``data:`` URI above :data:`INLINE_DATA_URI_BYTES` is uploaded through
  ``POST /v1/files`` and replaced by the file's URL; a server without that endpoint
  (501/404, such as cutover) gets the data URI as is.
- Status: ``GET /v1/predictions/{id}``, mapped by :data:`STATUS_MAP`; ``aborted``
  (never started) is a failure, since the 1.x clients cannot read it.
- Cancel: ``POST /v1/predictions/{id}/cancel``.
- Lookup (the legacy provider, docs/cutover-day.md): ``GET /v1/predictions/{id}`` of a
  prediction the gateway did not create, as the upstream's object; ``GET /v1/predictions``
  pages of the account's predictions (newest first, by cursor) for ``cutover import``.
- Webhooks: Standard Webhooks (``webhook-id``, ``webhook-timestamp``,
  ``webhook-signature``), keyed by the account's secret from
  ``GET /v1/webhooks/default/secret``, fetched on first use and again (at most once a
  minute) when a delivery does not verify, in case it was rotated.
- Output files live on Replicate for an hour: the gateway copies them when it records
  the result (``file_hosts``).
"""

from __future__ import annotations

import base64
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as _SwError

from adapters import errortext, transport
from contracts.errors import (
    ContractViolation,
    UpstreamRejected,
    UpstreamRetryable,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.replicate import WebhookEvent
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["DEFAULT_BASE_URL", "INLINE_DATA_URI_BYTES", "STATUS_MAP", "ReplicateAdapter",
           "snapshot_of"]

_Upstream = transport.Upstream  # the parameter named ``transport`` hides the module

DEFAULT_BASE_URL = "https://api.replicate.com"
INLINE_DATA_URI_BYTES = 256 * 1024
SECRET_REFRESH_S = 60.0

#: Replicate's status -> canonical state (docs/providers.md, "replicate").
STATUS_MAP: Mapping[str, JobState] = {
    "starting": JobState.QUEUED,
    "processing": JobState.RUNNING,
    "succeeded": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "canceled": JobState.CANCELED,
    "aborted": JobState.FAILED,
}


def map_status(raw: str) -> JobState:
    """Canonical state of a Replicate status; an unknown one is ``RUNNING``."""
    return STATUS_MAP.get(raw, JobState.RUNNING)


class _Prediction(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str = Field(min_length=1)
    status: str = Field(min_length=1)
    output: Any = None
    logs: str | None = None
    error: Any = None
    metrics: dict[str, Any] | None = None

    def snapshot(self) -> ProviderSnapshot:
        state = map_status(self.status)
        error = None if self.error in (None, "") else errortext.one_line(str(self.error))
        if state is JobState.FAILED and error is None:
            error = f"the upstream prediction ended {self.status}"
        return ProviderSnapshot(
            provider_job_id=self.id, state=state, raw_status=self.status,
            output=self.output, logs=self.logs, error=error, metrics=self.metrics or {},
        )


def snapshot_of(raw: Any) -> ProviderSnapshot:
    """A Replicate prediction object (a list page's item) as a snapshot.

    Raises ``ContractViolation`` when it is not a prediction.
    """
    try:
        return _Prediction.model_validate(raw).snapshot()
    except ValidationError as exc:
        raise ContractViolation(f"not a prediction: {transport.describe(exc)}") from exc


class ReplicateAdapter:
    """Drive a Replicate-compatible API through the adapter port.

    Parameters
    ----------
    name : str
        The provider's configured name.
    token : str or None
        The API token (``REPLICATE_API_TOKEN``).
    base_url : str
        The API root without ``/v1``.
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
        request_timeout_s: float = 30.0,
        fetch_interval_s: float = 2.0,
        fetch_max_interval_s: float = 30.0,
        rate_limit_per_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            webhooks=True, fetch=True, cancel=True,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = _Upstream(
            name=name, base_url=(base_url or DEFAULT_BASE_URL).removesuffix("/v1"),
            headers=headers, timeout_s=request_timeout_s, rate_limit_per_s=rate_limit_per_s,
            transport=transport, ca_file=ca_file,
        )
        self._secret: Webhook | None = None
        self._secret_at = 0.0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Create the prediction (see the module docstring for which endpoint).

        Raises ``ProviderBusy`` (429), ``UpstreamRetryable`` (5xx, cannot connect),
        ``UpstreamRejected`` (4xx, an unreadable answer, a failure after sending).
        """
        path, body = _create(request)
        body["input"] = await self._inputs(request.input)
        if request.webhook_url:
            body["webhook"] = request.webhook_url
            body["webhook_events_filter"] = [event.value for event in WebhookEvent]
        prediction = await self._http.create("create", "POST", path, _Prediction, json=body)
        return prediction.snapshot()

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """``GET /v1/predictions/{id}``; an unreadable body or a 404 fails the job."""
        response = await self._http.request("get", "GET", _path(ref.provider_job_id),
                                            allow=(404,))
        if response.status_code == 404:
            return ProviderSnapshot(
                provider_job_id=ref.provider_job_id, state=JobState.FAILED, raw_status="404",
                error=f"{self.name}: the upstream prediction is not found",
            )
        try:
            return transport.parse(self.name, "get", response, _Prediction).snapshot()
        except ContractViolation as exc:
            return ProviderSnapshot(provider_job_id=ref.provider_job_id, state=JobState.FAILED,
                                    raw_status="unreadable", error=exc.detail)

    async def lookup(self, prediction_id: str) -> tuple[dict[str, Any], ProviderSnapshot] | None:
        """The upstream's own object for ``prediction_id`` and its snapshot; None on 404.

        Raises ``UpstreamRetryable`` (5xx, 429, cannot connect) and ``ContractViolation``
        (an answer that is not a prediction).
        """
        response = await self._http.request("lookup", "GET", _path(prediction_id),
                                            allow=(404,))
        if response.status_code == 404:
            return None
        prediction = transport.parse(self.name, "lookup", response, _Prediction)
        raw = transport.json_body(self.name, "lookup", response)
        if prediction.id != prediction_id or not isinstance(raw, dict):
            raise ContractViolation(f"{self.name}: the lookup of {prediction_id!r} answered "
                                    f"another prediction ({prediction.id!r})")
        return raw, prediction.snapshot()

    async def list_page(self, url: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of ``GET /v1/predictions`` (``url``: a page's ``next``, on this
        upstream's host): its prediction objects and the next page's URL (None: the last).

        Raises ``UpstreamRetryable`` and ``ContractViolation`` (not a page).
        """
        path = "/v1/predictions"
        if url:
            parts = urllib.parse.urlsplit(url)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        body = transport.json_body(self.name, "list", await self._http.request("list", "GET", path))
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            raise ContractViolation(f"{self.name}: the prediction list has no results")
        following = body.get("next")
        return ([r for r in results if isinstance(r, dict)],
                following if isinstance(following, str) and following else None)

    async def cancel(self, ref: ProviderRef) -> bool:
        """``POST /v1/predictions/{id}/cancel``; True unless it was already over."""
        response = await self._http.request(
            "cancel", "POST", _path(ref.provider_job_id) + "/cancel", allow=(404,)
        )
        if response.status_code == 404:
            return False
        try:
            prediction = transport.parse(self.name, "cancel", response, _Prediction)
        except ContractViolation:
            return True
        return prediction.status == "canceled" or not map_status(prediction.status).terminal

    async def model_schema(self, target: str | None = None) -> dict[str, Any]:
        """The upstream version's ``openapi_schema``: ``GET /v1/models/{o}/{n}/versions/{id}``
        for ``owner/name:version``, the model's ``latest_version`` for ``owner/name``.

        Raises
        ------
        UpstreamRejected, UpstreamRetryable
            No such model or version, no schema in the answer, or a transport failure.
        """
        model, _, version = (target or "").partition(":")
        if not model or model.startswith("deployments/"):
            raise UpstreamRejected(f"{self.name}: {target!r} names no model to read a schema of")
        path = f"/v1/models/{_quote(model)}"
        response = await self._http.request(
            "schema", "GET", path + (f"/versions/{urllib.parse.quote(version)}" if version else "")
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        found = body.get("latest_version") if isinstance(body, dict) and not version else body
        schema = found.get("openapi_schema") if isinstance(found, dict) else None
        if not isinstance(schema, dict) or not schema:
            raise UpstreamRejected(f"{self.name}: {target} has no openapi_schema")
        return schema

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Standard Webhooks with the account's secret (see the module docstring)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if self._secret is None:
            await self._load_secret()
        try:
            self._check(lowered, body)
        except WebhookVerificationError:
            if time.monotonic() - self._secret_at < SECRET_REFRESH_S:
                raise
            await self._load_secret()
            self._check(lowered, body)

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """A verified webhook (a prediction object) as a snapshot."""
        try:
            return _Prediction.model_validate_json(body).snapshot()
        except ValidationError as exc:
            raise ContractViolation(
                f"{self.name}: webhook body is not a prediction: {transport.describe(exc)}"
            ) from exc

    # --- helpers -------------------------------------------------------------------------

    def _check(self, headers: dict[str, str], body: bytes) -> None:
        assert self._secret is not None
        try:
            self._secret.verify(body, headers, json_parse=False)
        except _SwError as exc:
            raise WebhookVerificationError(f"{self.name}: webhook does not verify: {exc}") from exc

    async def _load_secret(self) -> None:
        response = await self._http.request("secret", "GET", "/v1/webhooks/default/secret")
        try:
            key = transport.json_body(self.name, "secret", response)["key"]
            self._secret = Webhook(str(key))
        except (ContractViolation, KeyError, TypeError, ValueError) as exc:
            raise UpstreamRetryable(f"{self.name}: the webhook secret is unreadable") from exc
        self._secret_at = time.monotonic()

    async def _inputs(self, value: Any) -> Any:
        """Large ``data:`` URIs uploaded through ``/v1/files`` (where it exists)."""
        if isinstance(value, dict):
            return {k: await self._inputs(v) for k, v in value.items()}
        if isinstance(value, list):
            return [await self._inputs(v) for v in value]
        if isinstance(value, str) and value.startswith("data:") and (
            len(value) > INLINE_DATA_URI_BYTES
        ):
            return await self._upload(value)
        return value

    async def _upload(self, uri: str) -> str:
        head, _, payload = uri.partition(",")
        if not head.endswith(";base64"):
            return uri
        content_type = head[5:].split(";")[0] or "application/octet-stream"
        try:
            data = base64.b64decode(payload, validate=True)
        except ValueError:
            return uri
        files = {"content": ("input", data, content_type)}
        response = await self._http.request("upload", "POST", "/v1/files", files=files,
                                            allow=(404, 405, 501))
        if response.status_code in (404, 405, 501):
            return uri
        try:
            url = transport.json_body(self.name, "upload", response)["urls"]["get"]
        except (ContractViolation, KeyError, TypeError) as exc:
            raise UpstreamRejected(f"{self.name}: the file upload answer is unreadable") from exc
        return str(url)


def _path(prediction_id: str) -> str:
    return "/v1/predictions/" + urllib.parse.quote(prediction_id, safe="")


def _create(request: SubmitRequest) -> tuple[str, dict[str, Any]]:
    """Endpoint and body (without input) for the target, or the route's model/version."""
    target = request.target or (
        request.model if request.version == "hidden" else f"{request.model}:{request.version}"
    )
    if target.startswith("deployments/"):
        owner_name = target.removeprefix("deployments/")
        return f"/v1/deployments/{_quote(owner_name)}/predictions", {}
    model, _, version = target.partition(":")
    if version:
        return "/v1/predictions", {"version": version}
    return f"/v1/models/{_quote(model)}/predictions", {}


def _quote(owner_name: str) -> str:
    return "/".join(urllib.parse.quote(p, safe="") for p in owner_name.split("/"))
