"""Typed keys of the aiohttp application (docs/architecture.md, rule 8)."""

from __future__ import annotations

from datetime import datetime

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

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", JobStore)
NOTIFIER = web.AppKey("notifier", Notifier)
ROUTER = web.AppKey("router", Router)
PROVIDERS = web.AppKey("providers", dict[str, Provider])
PREDICTIONS = web.AppKey("predictions", PredictionService)
INTAKE = web.AppKey("intake", Intake)
STORAGE = web.AppKey("storage", Storage)
SIGNING_SECRET = web.AppKey("signing_secret", str)
STARTED_AT = web.AppKey("started_at", datetime)
CLOCK = web.AppKey("clock", Clock)
METRICS = web.AppKey("metrics", Metrics)
DEAD_LETTERS = web.AppKey("dead_letters", DeadLetters)
SCHEMAS = web.AppKey("schemas", Schemas)
ROUTES = web.AppKey("routes", RouteServices)
UPLOADS = web.AppKey("uploads", Uploads)
CONSOLE_SESSIONS = web.AppKey("console_sessions", ConsoleSessions)
