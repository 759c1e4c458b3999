"""Configuration sections of the gateway's outer surface (re-exported by
:mod:`gateway.config`): ``[storage]``, ``[files]``, ``[logging]``, ``[limits]``,
``[retention]``, ``[admin]``, ``[webhooks]`` and ``[operator_webhook]``."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from contracts.errors import ConfigurationError
from gateway.rollout.announce import EVENT_TYPES
from gateway.storage.base import MIN_PART_BYTES, PART_SIZE_BYTES
from gateway.webhooks.signing import check_secret

__all__ = [
    "AdminSettings",
    "AdminToken",
    "FilesSettings",
    "LimitSettings",
    "LoggingSettings",
    "OperatorWebhookSettings",
    "RetentionSettings",
    "StorageSettings",
    "WebhookSettings",
    "checked_secret",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StorageSettings(_Section):
    """``[storage]``: how owned files are reached (docs/storage.md).

    For ``storage_url = "s3://bucket/prefix"``: ``endpoint_url``, ``region`` and the
    credentials (unset: the standard AWS variables and profiles); ``part_size_bytes`` is
    one multipart part, the most held in memory per upload. ``delivery`` says who serves
    files to apps: ``"gateway"`` (its ``/assets/`` and ``/v1/files`` URLs, the default) or
    ``"presigned"`` (a redirect to a URL signed for ``presigned_url_ttl_s`` seconds, S3
    only). ``fsync`` (a local directory): each file is on disk before it is recorded, so
    a prediction reported ``succeeded`` keeps its files through a machine crash; false
    leaves that to the kernel's write-back (docs/storage.md, "Durability").
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    part_size_bytes: int = Field(default=PART_SIZE_BYTES, ge=MIN_PART_BYTES)
    delivery: Literal["gateway", "presigned"] = "gateway"
    presigned_url_ttl_s: float = Field(default=300.0, gt=0, le=7 * 24 * 3600)
    fsync: bool = True


class FilesSettings(_Section):
    """``[files]``: the Files API (docs/files.md): how long an upload lives, its largest
    size, and how long a signed download URL handed to a provider stays valid."""

    ttl_s: float = Field(default=24 * 3600.0, gt=0)
    max_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    download_ttl_s: float = Field(default=3600.0, gt=0)


class LoggingSettings(_Section):
    """``[logging]``: ``format`` of each log line (``json`` objects or ``text``) and the
    ``level`` (docs/logging.md). ``cutover serve --log-level`` overrides the level."""

    format: Literal["json", "text"] = "json"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] | None = None

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        """``debug`` is ``DEBUG`` (it stopped every command with a traceback)."""
        return value.upper() if isinstance(value, str) else value


class LimitSettings(_Section):
    """``[limits]``: a token bucket per API token (off by default: one app needs none).

    Defaults follow Replicate's published limits (docs/replicate-api.md §5.1): 600
    creates and 3,000 other requests a minute; ``burst_s`` seconds' worth of requests may
    come at once. Over the limit: 429, ``Retry-After`` in whole seconds, problem+json.
    """

    enabled: bool = False
    creates_per_minute: float = Field(default=600.0, gt=0)
    other_per_minute: float = Field(default=3000.0, gt=0)
    burst_s: float = Field(default=10.0, gt=0)


class RetentionSettings(_Section):
    """``[retention]`` (docs/retention.md): delivered webhooks and applied provider events
    are pruned after their age; ``data_retention_s`` (unset: never) removes the inputs,
    outputs, logs and owned files of finished predictions after that many seconds
    (Replicate keeps API prediction data one hour). Each round handles at most ``batch``
    items of each kind, every ``interval_s``."""

    outbox_age_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    provider_events_age_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    data_retention_s: float | None = Field(default=None, gt=0)
    batch: int = Field(default=500, gt=0, le=10_000)
    interval_s: float = Field(default=60.0, gt=0)


AdminRole = Literal["admin", "viewer"]


class AdminToken(_Section):
    """A named admin token: the name is what the route audit records as "who"; ``role``
    ``admin`` (the default) may change routes, ``viewer`` only reads (docs/console.md)."""

    name: str = Field(min_length=1, max_length=64)
    token: SecretStr
    role: AdminRole = "admin"


class AdminSettings(_Section):
    """``[admin]``: the admin API's own tokens (distinct from the Replicate API tokens).

    Each entry is a token, or ``{name = "alice", token = "...", role = "viewer"}``; an
    unnamed token is called ``admin-N`` (its 1-based position) in the audit trail and has
    the ``admin`` role. The console (docs/console.md) signs a person out after
    ``session_idle_s`` without a page they asked for, and after ``session_max_s`` in any
    case.
    """

    tokens: list[SecretStr | AdminToken] = Field(default_factory=list)
    session_idle_s: float = Field(default=1800.0, ge=60.0, le=86400.0)
    session_max_s: float = Field(default=43200.0, ge=60.0, le=30 * 86400.0)

    def roles(self) -> list[tuple[str, str, AdminRole]]:
        """``(name, secret, role)`` of every admin token."""
        return [
            (t.name, t.token.get_secret_value(), t.role)
            if isinstance(t, AdminToken)
            else (f"admin-{i}", t.get_secret_value(), "admin")
            for i, t in enumerate(self.tokens, start=1)
        ]

    def named_tokens(self) -> list[tuple[str, str]]:
        """``(name, secret)`` of every admin token."""
        return [(name, secret) for name, secret, _ in self.roles()]


def checked_secret(value: SecretStr | None) -> SecretStr | None:
    """``value`` when the webhook signer takes it (or None); ValueError naming why not."""
    if value is not None:
        try:
            check_secret(value.get_secret_value())
        except ConfigurationError as exc:
            raise ValueError(exc.detail) from None
    return value


class WebhookSettings(_Section):
    """``[webhooks]``: outbound webhooks to apps (docs/replicate-api.md §6, docs/webhooks.md).

    ``retry_delays_s[i]`` is the wait after failed attempt ``i + 1`` of a ``completed``
    event (each scaled by a random factor within ``1 ± retry_jitter_ratio``); a receiver's
    ``Retry-After`` is honoured up to ``max_retry_after_s``. ``timeout_s`` bounds one
    whole attempt. ``previous_signing_secret`` is also signed with until
    ``previous_valid_until`` (timezone-aware), for a rotation overlap.
    """

    allow_hosts: list[str] = Field(default_factory=list)
    signing_secret: SecretStr | None = None
    previous_signing_secret: SecretStr | None = None
    previous_valid_until: datetime | None = None
    retry_delays_s: list[float] = Field(
        default_factory=lambda: [1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0]
    )
    retry_jitter_ratio: float = Field(default=0.1, ge=0, lt=1)
    max_retry_after_s: float = Field(default=300.0, ge=0)
    timeout_s: float = Field(default=10.0, gt=0)
    throttle_s: float = Field(default=0.5, ge=0)
    max_concurrency: int = Field(default=64, gt=0)
    max_per_host: int = Field(default=16, gt=0)

    @field_validator("retry_delays_s")
    @classmethod
    def _finite_delays(cls, value: list[float]) -> list[float]:
        if any(not math.isfinite(d) or d < 0 for d in value):
            raise ValueError("retry delays must be finite and >= 0 seconds")
        return value

    @field_validator("signing_secret", "previous_signing_secret")
    @classmethod
    def _whsec(cls, value: SecretStr | None) -> SecretStr | None:
        """One the signer would refuse: ``check`` passed it and ``serve`` stopped after
        it had started (docs/webhooks.md)."""
        return checked_secret(value)

    @model_validator(mode="after")
    def _rotation(self) -> WebhookSettings:
        if (self.previous_signing_secret is None) != (self.previous_valid_until is None):
            raise ValueError("previous_signing_secret and previous_valid_until go together")
        if self.previous_valid_until is not None and self.previous_valid_until.tzinfo is None:
            raise ValueError("previous_valid_until needs a time zone (e.g. 2026-06-01T00:00:00Z)")
        return self


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class OperatorWebhookSettings(_Section):
    """``[operator_webhook]`` (docs/webhooks.md, "Operator webhook"): every live route
    change (a canary or shadow set, a PATCH, a promote, a rollback by hand or by the guard,
    a guard paused or resumed) is POSTed to ``url``, signed with Standard Webhooks headers
    keyed with the ``whsec_`` secret in the environment variable ``secret_env`` (never
    the file), through the outbox: retried on ``[webhooks] retry_delays_s``, then a dead
    letter. ``events``: the types sent (of :data:`gateway.rollout.announce.EVENT_TYPES`;
    empty, the default: all). The URL passes the SSRF guard like an app's webhook: a
    private host needs ``[webhooks] allow_hosts``.
    """

    url: str
    secret_env: str
    events: list[str] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _absolute(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"url must be an absolute http(s) URL, got {value!r}")
        return value

    @field_validator("secret_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.fullmatch(value):
            raise ValueError("secret_env names an environment variable holding a whsec_ "
                             f"secret (e.g. CUTOVER_OPERATOR_WEBHOOK_SECRET), got {value!r}")
        return value

    @field_validator("events")
    @classmethod
    def _known_events(cls, value: list[str]) -> list[str]:
        unknown = [e for e in value if e not in EVENT_TYPES]
        if unknown:
            raise ValueError(f"unknown event type(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(EVENT_TYPES)}")
        return value

    def secret(self, environ: Mapping[str, str] | None = None) -> str:
        """The signing secret from ``secret_env`` in ``environ`` (default ``os.environ``).

        Raises
        ------
        ConfigurationError
            The variable is unset or empty, or not a ``whsec_`` secret the signer takes;
            the message names the setting.
        """
        value = (os.environ if environ is None else environ).get(self.secret_env, "")
        where = f"[operator_webhook] secret_env = {self.secret_env!r}"
        if not value:
            raise ConfigurationError(f"{where}: ${self.secret_env} is not set (a whsec_ "
                                     "secret: echo whsec_$(openssl rand -base64 32))")
        try:
            check_secret(value)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: ${self.secret_env}: {exc.detail}") from None
        return value
