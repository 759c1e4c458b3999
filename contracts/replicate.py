"""Replicate's wire format, as the official clients read and write it.

Source: docs/replicate-api.md. Requests from apps are parsed strictly
(``extra="forbid"``, schema ``additionalProperties: false``, §2.1); responses follow §4.1
and the Python 1.0.7 client's validation rules (§4.3): ids are 26 lowercase
alphanumerics, ``urls`` values are always strings, ``status`` is one of five values
(never ``aborted``).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "VERSION_ID_RE",
    "Account",
    "CreatePrediction",
    "Deployment",
    "Model",
    "ModelPredictionRequest",
    "Prediction",
    "PredictionPage",
    "PredictionRequest",
    "Problem",
    "Version",
    "WebhookEvent",
    "WebhookSecret",
    "parse_version_ref",
]


class WebhookEvent(StrEnum):
    """A webhook event type (docs/replicate-api.md §6.2), in the order a prediction causes
    them: what an app's ``webhook_events_filter`` names, what the outbox sends, and what
    the gateway asks Cog and Replicate to send it."""

    START = "start"
    OUTPUT = "output"
    LOGS = "logs"
    COMPLETED = "completed"


VERSION_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_UNSAFE_URL_CHARS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

Status = Literal["starting", "processing", "succeeded", "failed", "canceled"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    input: dict[str, Any]
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None
    webhook_completed: str | None = None  # legacy, still honoured (§3.1)
    stream: bool | None = None

    @field_validator("webhook_events_filter")
    @classmethod
    def _known_events(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        allowed = [event.value for event in WebhookEvent]
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ValueError(f"unknown webhook events {unknown}; allowed: {allowed}")
        return [event for event in allowed if event in value]

    @field_validator("webhook", "webhook_completed")
    @classmethod
    def _absolute_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an absolute http(s) URL")
        if value is not None and _UNSAFE_URL_CHARS.search(value):
            raise ValueError("must not contain whitespace or control characters")
        return value


class ModelPredictionRequest(_Request):
    """Body of ``POST /v1/models/{o}/{n}/predictions`` and the deployments route (§2.2)."""


class PredictionRequest(_Request):
    """Body of ``POST /v1/predictions`` (§2.1): ``version`` in one of three forms."""

    version: str = Field(min_length=1)


class CreatePrediction(BaseModel):
    """A create request after the route-independent parsing: what the API asks for.

    Exactly one of ``model`` / ``version_id`` / ``deployment`` identifies the target;
    ``model`` with ``version_id`` is the ``owner/name:version`` form.
    """

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    version_id: str | None = None
    deployment: str | None = None
    input: dict[str, Any]
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None
    stream: bool = False


def parse_version_ref(ref: str) -> tuple[str | None, str | None]:
    """Split a ``version`` field into ``(model, version_id)`` (docs/replicate-api.md §2.1).

    ``owner/name`` -> ``("owner/name", None)``; ``owner/name:<64 hex>`` -> both; a bare
    64-hex id -> ``(None, id)``.

    Raises
    ------
    ValueError
        For any other shape.
    """
    if VERSION_ID_RE.match(ref):
        return None, ref
    model, sep, version = ref.partition(":")
    if not _MODEL_RE.match(model):
        raise ValueError(
            f"version {ref!r} is not 'owner/name', 'owner/name:<version id>' "
            "or a 64-character hex version id"
        )
    if not sep:
        return model, None
    if not VERSION_ID_RE.match(version):
        raise ValueError(f"version id {version!r} is not 64 lowercase hex characters")
    return model, version


def check_model_name(owner: str, name: str) -> str:
    """``owner/name`` if both parts are valid path segments, else ValueError."""
    model = f"{owner}/{name}"
    if not _MODEL_RE.match(model):
        raise ValueError(f"{model!r} is not a valid owner/name")
    return model


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Rare(_Response):
    """A response of an endpoint apps call seldom (models, versions, deployments, the
    account, the webhook secret): its validator is built when first used, not at every
    start-up (docs/benchmarks.md, "Start-up: the last 10 %")."""

    model_config = ConfigDict(defer_build=True)


class Prediction(_Response):
    """The prediction object (§4.1), exactly as GET /v1/predictions/{id} returns it."""

    id: str
    model: str
    version: str
    input: dict[str, Any] | None
    output: Any = None
    logs: str | None = ""
    error: str | None = None
    status: Status
    created_at: str
    started_at: str | None = None
    completed_at: str | None = None
    urls: dict[str, str]
    metrics: dict[str, Any] = Field(default_factory=dict)
    data_removed: bool = False
    source: Literal["api", "web"] = "api"
    deadline: str | None = None
    deployment: str | None = None
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON object sent to apps: optional keys that are unset are left out."""
        data = self.model_dump(mode="json")
        for key in ("deadline", "deployment", "webhook", "webhook_events_filter"):
            if data[key] is None:
                del data[key]
        return data


class PredictionPage(_Response):
    """One page of ``GET /v1/predictions`` (§2.5); ``next``/``previous`` are absolute."""

    next: str | None
    previous: str | None
    results: list[dict[str, Any]]


class Model(_Rare):
    """``GET /v1/models/{o}/{n}`` (§2.7): the fields Python's Model requires."""

    url: str
    owner: str
    name: str
    description: str | None = None
    visibility: Literal["public", "private"] = "private"
    github_url: str | None = None
    paper_url: str | None = None
    license_url: str | None = None
    run_count: int = 0
    cover_image_url: str | None = None
    default_example: dict[str, Any] | None = None
    latest_version: dict[str, Any] | None = None


class Version(_Rare):
    """``GET /v1/models/{o}/{n}/versions/{id}`` (§2.7).

    ``cog_version`` and ``openapi_schema`` are never null: null breaks the Python client.
    """

    id: str
    created_at: str
    cog_version: str
    openapi_schema: dict[str, Any]


class Deployment(_Rare):
    """``GET /v1/deployments/{o}/{n}`` (§2.8)."""

    owner: str
    name: str
    current_release: dict[str, Any] | None = None


class Account(_Rare):
    """``GET /v1/account`` (§2.12)."""

    type: Literal["user", "organization"] = "organization"
    username: str
    name: str
    github_url: str | None = None


class WebhookSecret(_Rare):
    """``GET /v1/webhooks/default/secret`` (§2.10): ``whsec_`` + base64 without ``_``."""

    key: str


class Problem(_Response):
    """An RFC 9457 problem document, the body of every error response (§5.1)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
