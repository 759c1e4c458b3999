"""Typed keys of the aiohttp application (docs/architecture.md, rule 8), and :class:`Edge`,
what the handlers read of the settings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from aiohttp import web

from gateway.clock import Clock
from gateway.config import Settings
from gateway.files.uploads import Uploads
from gateway.intake import Intake
from gateway.metrics import Metrics
from gateway.notify import Notifier
from gateway.predictions import PredictionService
from gateway.providers import Provider
from gateway.rollout.router import Router
from gateway.rollout.wiring import RouteServices
from gateway.storage import Storage
from gateway.store.jobs import JobStore
from gateway.store.sessions import ConsoleSessions
from gateway.validation import Schemas
from gateway.webhooks.deadletter import DeadLetters


@dataclass(frozen=True)
class Edge:
    """The settings the HTTP handlers use, taken once by the app factory (docs/architecture.md,
    rule 9): URLs, body limits in bytes, stream and wait times in seconds."""

    public_url: str
    account_username: str
    max_body_bytes: int
    intake_limit: int
    prefer_wait_max_s: float
    max_job_lifetime_s: float
    stream_poll_s: float
    stream_keepalive_s: float
    asset_delivery: Literal["gateway", "presigned"]
    presigned_url_ttl_s: float

    @classmethod
    def of(cls, settings: Settings) -> Edge:
        gw = settings.gateway
        return cls(
            public_url=gw.public_url, account_username=gw.account_username,
            max_body_bytes=gw.max_body_bytes, intake_limit=gw.intake_limit,
            prefer_wait_max_s=gw.prefer_wait_max_s, max_job_lifetime_s=gw.max_job_lifetime_s,
            stream_poll_s=gw.stream_poll_s, stream_keepalive_s=gw.stream_keepalive_s,
            asset_delivery=settings.storage.delivery,
            presigned_url_ttl_s=settings.storage.presigned_url_ttl_s,
        )


SETTINGS = web.AppKey("settings", Settings)
"""The whole configuration: for the composition root (``app``, ``assembly``) only."""
EDGE = web.AppKey("edge", Edge)
STORE = web.AppKey("store", JobStore)
NOTIFIER = web.AppKey("notifier", Notifier)
ROUTER = web.AppKey("router", Router)
PROVIDERS = web.AppKey("providers", dict[str, Provider])
PREDICTIONS = web.AppKey("predictions", PredictionService)
INTAKE = web.AppKey("intake", Intake)
STORAGE = web.AppKey("storage", Storage)
SIGNING_SECRET = web.AppKey("signing_secret", str)  # the default tenant's
TENANT_SECRETS = web.AppKey("tenant_secrets", dict[str, str])  # tenant -> its signing secret
FILE_OWNERS = web.AppKey("file_owners", dict[str, frozenset[str]])  # gateway/config/tenants.py
STARTED_AT = web.AppKey("started_at", datetime)
CLOCK = web.AppKey("clock", Clock)
METRICS = web.AppKey("metrics", Metrics)
DEAD_LETTERS = web.AppKey("dead_letters", DeadLetters)
SCHEMAS = web.AppKey("schemas", Schemas)
ROUTES = web.AppKey("routes", RouteServices)
UPLOADS = web.AppKey("uploads", Uploads)
CONSOLE_SESSIONS = web.AppKey("console_sessions", ConsoleSessions)
