"""``create_app(settings)``: the aiohttp application and everything it owns.

Each resource lives in its own cleanup context, created at start-up and closed at
shutdown in reverse order: the database engine (migrations applied at start), the
provider adapters, the HTTP clients for output files and (SSRF-guarded) outbound
webhooks, then the background loops. The admin API is a sub-application under
``/admin`` with its own tokens (:mod:`gateway.http.admin`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from aiohttp import web

from contracts.auth import DEFAULT_TENANT
from gateway import assembly, collector, retry
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import Settings
from gateway.config import tenants as tenancy
from gateway.dispatcher import Dispatcher
from gateway.files.inputs import InputStager
from gateway.files.outputs import OutputCopier
from gateway.files.service import FileService
from gateway.finalizer import Finalizer, InterimBudget
from gateway.http import (
    access,
    admin,
    api,
    assets,
    files,
    keys,
    openapi,
    ops,
    provider_webhooks,
    readlane,
    streams,
    uploads,
)
from gateway.http.middleware import ApiTokens, scope_of
from gateway.http.ratelimit import Limiter
from gateway.intake import EventProcessor, Intake
from gateway.loop import Loop, NextDue
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.poller import Poller
from gateway.predictions import PredictionService
from gateway.providers import Provider, build_adapter, credential
from gateway.reaper import Reaper, next_work
from gateway.rollout.router import Router
from gateway.store import lease
from gateway.store.deadletters import DeadLetterRows
from gateway.store.deliveries import DeliveryQueue
from gateway.store.due import Due
from gateway.store.engine import aio, checkpoint, db
from gateway.store.events import ProviderEvents
from gateway.store.files import FileStore
from gateway.store.handoff import Handoff
from gateway.store.jobs import JobStore
from gateway.store.outbox import Planner
from gateway.store.reader import JobReader
from gateway.store.retention import RetentionStore
from gateway.validation import Schemas
from gateway.watch import Watcher
from gateway.webhooks import delivery, post, ssrf
from gateway.webhooks.deadletter import DeadLetters

__all__ = ["LOOPS", "WEBHOOK_POLICY", "create_app", "serve"]

log = logging.getLogger(__name__)
LOOPS = web.AppKey("loops", list[Loop])
OWNER = web.AppKey("owner", str)
WEBHOOK_POLICY = web.AppKey("webhook_policy", ssrf.WebhookTargetPolicy)
_WEBHOOK_HTTP = web.AppKey("webhook_http", aiohttp.ClientSession)
_ENGINE = web.AppKey("engine", db.Engine)
_EVENTS = web.AppKey("events", ProviderEvents)
SHUTDOWN_GRACE_S = 5.0


def create_app(
    settings: Settings, *, run_loops: bool = True, clock: Clock = SYSTEM_CLOCK
) -> web.Application:
    """The gateway application for ``settings`` (no I/O until it starts).

    ``run_loops=False`` leaves the background loops unstarted; tests then drive them
    with ``run_once()`` (they are under ``app[LOOPS]``). ``clock`` is the only source of
    time for everything the app builds (:mod:`gateway.clock`): tests move it instead of
    rewriting rows. ``app[WEBHOOK_POLICY]`` (the SSRF guard for webhook targets, checked
    at create and at delivery) may be replaced before the app starts, e.g. with a stub
    resolver. Settings stop here: everything below takes plain arguments.
    """
    gw = settings.gateway
    metrics = Metrics()
    limiter = None
    if settings.limits.enabled:
        limits = settings.limits
        per_minute = {"create": limits.creates_per_minute, "other": limits.other_per_minute}
        limiter = Limiter(per_minute, burst_s=limits.burst_s, clock=clock)
    tokens = ApiTokens(tenancy.api_tokens(settings), tenancy.token_tenants(settings))
    front = access.front_middleware(tokens, limiter, metrics, gw.body_read_timeout_s)
    app = web.Application(client_max_size=gw.max_body_bytes,
                          middlewares=[front, *readlane.lanes(gw.read_concurrency)])
    app[keys.SETTINGS], app[keys.EDGE] = settings, keys.Edge.of(settings)
    app[keys.FILE_OWNERS] = tenancy.file_owners(settings, scope_of)
    app[keys.CLOCK] = clock
    app[keys.STARTED_AT] = clock.now()
    app[keys.NOTIFIER] = Notifier()
    app[keys.METRICS] = metrics
    app[keys.ROUTER] = Router(settings.routes)
    app[keys.STORAGE] = assembly.storage_for(settings)
    app[keys.SCHEMAS] = Schemas(assembly.schema_fetcher(lambda: app[keys.PROVIDERS]))
    app[WEBHOOK_POLICY] = ssrf.WebhookTargetPolicy(settings.webhooks.allow_hosts)
    app.cleanup_ctx.append(_storage)
    app.cleanup_ctx.append(_database)
    app.cleanup_ctx.append(_providers)
    app.cleanup_ctx.append(_webhook_http)
    app.cleanup_ctx.append(_services)
    app.cleanup_ctx.append(_loops(run_loops))
    app.add_routes(ops.routes)
    app.add_routes(assets.routes)
    app.add_routes(provider_webhooks.routes)
    app.add_routes(uploads.routes)
    app.add_routes(api.routes)
    app.add_routes(streams.routes)
    app.add_routes(files.routes)
    app.add_routes(openapi.routes)
    admin.mount(app, settings.admin)  # the admin API (Bearer) and the console (sessions)
    return app


def serve(settings: Settings, *, ssl_context: ssl.SSLContext | None = None,
          sock: socket.socket | None = None) -> None:
    """Run the gateway on ``[gateway] listen`` or on ``sock`` (bound elsewhere: ``cutover serve
    --listen-fd``), accept queue ``[gateway] listen_backlog`` deep, until SIGINT or SIGTERM."""
    gw = settings.gateway
    where: dict[str, Any] = {"sock": sock} if sock else {"host": gw.host, "port": gw.port}
    app = create_app(settings)
    app.on_startup.append(collector.settle)  # after the cleanup contexts: all is built
    web.run_app(app, loop=_event_loop(), ssl_context=ssl_context, backlog=gw.listen_backlog,
                print=None, access_log=None, shutdown_timeout=10.0, **where)


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (Linux, macOS), else asyncio's own: the
    gateway's request path is mostly event-loop work (docs/benchmarks.md)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover (no wheel for this platform)
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _storage(app: web.Application) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await app[keys.STORAGE].aclose()


async def _database(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    engine = db.create_engine(settings.gateway.database_url,
                              statement_timeout_s=settings.gateway.database_statement_timeout_s)
    checkpoint.install(engine)  # SQLite's WAL checkpoint off the loop (store/engine/checkpoint.py)
    try:
        await db.migrate(engine)
        app[_ENGINE] = engine
        found = await assembly.signing_secrets(engine, settings, app[keys.CLOCK])
        app[keys.SIGNING_SECRET], app[keys.TENANT_SECRETS] = found[DEFAULT_TENANT], found
        app[keys.DEAD_LETTERS] = DeadLetters(DeadLetterRows(engine, clock=app[keys.CLOCK]))
        yield
    finally:
        await engine.dispose()
        await checkpoint.close(engine)


async def _providers(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    providers = {
        name: Provider(name, build_adapter(
            name, conf.kind, token=credential(conf.token_env), **conf.adapter_options()
        ), conf.max_concurrency, conf.submit_timeout_s or settings.gateway.submit_timeout_s)
        for name, conf in settings.providers.items()
    }
    app[keys.PROVIDERS] = providers
    try:
        yield
    finally:
        for provider in providers.values():
            await provider.adapter.aclose()


_FINALIZER = web.AppKey("finalizer", Finalizer)
_DELIVERY = web.AppKey("delivery", delivery.Delivery)


async def _services(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    gw, clock = settings.gateway, app[keys.CLOCK]
    app[OWNER] = owner = lease.process_owner()  # docs/lifecycle.md, "Lease owners"
    app[_DELIVERY], handoff = _delivery(app)  # new completed rows go straight to it
    store = JobStore(
        app[_ENGINE],
        planner=Planner(
            base_url=gw.public_url,
            throttle_s=settings.webhooks.throttle_s,
            stream_secret=app[keys.SIGNING_SECRET],
            stream_secrets=app[keys.TENANT_SECRETS],
            handoff=handoff,
        ),
        owner=owner,
        lease_s=gw.lease_s,
        clock=clock,  # an apply lease given back: its job's events are due at once
        on_given_back=lambda job_id: app[keys.NOTIFIER].wake(LoopName.EVENTS),
    )
    app[keys.STORE] = store
    app[_EVENTS] = ProviderEvents(app[_ENGINE], owner=owner, lease_s=gw.lease_s, clock=clock)
    await assembly.open_routes(app, app[_ENGINE])  # routes as data, shadows (docs/canary.md)
    reader = JobReader(store)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(store.fast_reads.close)
        stack.push_async_callback(reader.close)
        stack.push_async_callback(app[_EVENTS].close)  # its PostgreSQL connections
        copier = OutputCopier(
            storage=app[keys.STORAGE],
            public_url=gw.public_url,
            max_output_bytes=gw.max_output_bytes,
            allowed_types=gw.allowed_output_types,
            download_timeout_s=gw.output_download_timeout_s,
            recorded=RetentionStore(app[_ENGINE]).asset_keys,  # uploads (docs/cog.md §1.10)
        )
        app[keys.UPLOADS] = assembly.uploads(settings, copier, app[keys.STORAGE], store)
        app[_FINALIZER] = Finalizer(
            store=store, copier=copier,
            notifier=app[keys.NOTIFIER],
            file_hosts=assembly.output_file_hosts(settings),
            metrics=app[keys.METRICS], translator=assembly.translator(app),
            contract=assembly.output_contract(settings, app[keys.SCHEMAS]),
            interim=InterimBudget(clock=app[keys.CLOCK]),
        )
        app[keys.PREDICTIONS] = PredictionService(
            store=store, router=app[keys.ROUTER],
            refresh_routes=app[keys.ROUTES].sync.refresh_if_stale,
            notifier=app[keys.NOTIFIER],
            webhook_policy=app[WEBHOOK_POLICY],
            public_url=gw.public_url,
            reader=reader,
            schemas=app[keys.SCHEMAS],
            stream_secret=app[keys.SIGNING_SECRET],
            stream_secrets=app[keys.TENANT_SECRETS],
            keep_finished_bodies=settings.retention.data_retention_s is None,
            clock=clock,
            metrics=app[keys.METRICS],
            adopter=assembly.adopter(app, app[_ENGINE], app[_FINALIZER]),
        )
        app[files.FILES] = FileService(
            store=FileStore(app[_ENGINE]),
            storage=app[keys.STORAGE],
            public_url=gw.public_url,
            provider_base_url=gw.webhook_base_url,
            secret=assembly.download_key(app[keys.SIGNING_SECRET]),
            ttl_s=settings.files.ttl_s,
            max_bytes=settings.files.max_bytes,
            download_ttl_s=settings.files.download_ttl_s,
            clock=clock,
        )
        app[keys.INTAKE] = Intake(
            store=store, events=app[_EVENTS], providers=app[keys.PROVIDERS],
            notifier=app[keys.NOTIFIER], clock=clock, finalizer=app[_FINALIZER],
        )
        assembly.attach_answers(app[keys.PROVIDERS], app[keys.INTAKE])
        yield


async def _webhook_http(app: web.Application) -> AsyncIterator[None]:
    hooks = app[keys.SETTINGS].webhooks
    async with post.open_session(
        app[WEBHOOK_POLICY], timeout_s=hooks.timeout_s, max_concurrency=hooks.max_concurrency
    ) as session:
        app[_WEBHOOK_HTTP] = session
        yield


def build_loops(app: web.Application) -> list[Loop]:
    """The background loops of this process, wired to the app's services."""
    settings = app[keys.SETTINGS]
    gw = settings.gateway
    common: dict[str, Any] = {
        "store": app[keys.STORE],
        "providers": app[keys.PROVIDERS],
        "finalizer": app[_FINALIZER],
        "notifier": app[keys.NOTIFIER],
        "interval_s": gw.loop_interval_s,
        "clock": app[keys.CLOCK],
    }
    base = gw.webhook_base_url
    backoff = retry.Backoff(base_s=gw.dispatch_backoff_base_s, max_s=gw.dispatch_backoff_max_s)
    loops: list[Loop] = [
        Dispatcher(
            **common, callback_base_url=base, resolve_input=app[files.FILES].resolve_input,
            translator=assembly.translator(app),
            metrics=app[keys.METRICS], shadow_gate=app[keys.ROUTES].shadow_gate(),
            stager=InputStager(app[keys.STORAGE], gw.public_url, app[keys.STORE]),
            backoff=backoff, cancel_grace_s=gw.cancel_grace_s, cancel_resend_s=gw.cancel_resend_s,
        ),
        EventProcessor(**common, events=app[_EVENTS], backoff=backoff),
        Poller(**common),
        Reaper(
            **common, cancel_grace_s=gw.cancel_grace_s, cancel_resend_s=gw.cancel_resend_s,
            max_job_lifetime_s=gw.max_job_lifetime_s,
            shadow_gate=app[keys.ROUTES].shadow_gate(),
        ),
        app[_DELIVERY],
        Watcher(store=app[keys.STORE], notifier=app[keys.NOTIFIER], interval_s=0.25,
                clock=app[keys.CLOCK]),
        assembly.retention_loop(app, RetentionStore(app[_ENGINE])),
        *app[keys.ROUTES].loops(guard_interval_s=gw.guard_interval_s, owner=app[OWNER],
                                lease_s=gw.lease_s, interval_s=gw.loop_interval_s),
    ]
    _schedule(app, loops)
    return loops


def _schedule(app: web.Application, loops: list[Loop]) -> None:
    """Let each loop sleep until its next work falls due (:mod:`gateway.store.due`)."""
    gw = app[keys.SETTINGS].gateway
    due = Due(app[_ENGINE])
    next_due: dict[LoopName, NextDue] = {
        LoopName.DISPATCHER: due.dispatch,
        LoopName.POLLER: due.fetch,
        LoopName.EVENTS: due.events,
        LoopName.DELIVERY: due.delivery,
        LoopName.REAPER: next_work(functools.partial(
            due.reap,
            grace_s=gw.cancel_grace_s,
            resend_s=gw.cancel_resend_s,
            lifetime_s=gw.max_job_lifetime_s,
        ), app[keys.ROUTES].shadow_gate()),
    }
    for loop in loops:
        loop.max_idle_s = max(gw.loop_max_idle_s, gw.loop_interval_s)
        loop.next_due = next_due.get(loop.name, loop.next_due)  # or the loop's own


def _delivery(app: web.Application) -> tuple[delivery.Delivery, Handoff]:
    settings = app[keys.SETTINGS]
    hooks = settings.webhooks
    lease_s = settings.gateway.lease_s + hooks.timeout_s
    queue = DeliveryQueue(app[_ENGINE], owner=app[OWNER], lease_s=lease_s, clock=app[keys.CLOCK])
    sender = delivery.Delivery(
        queue=queue,
        http=app[_WEBHOOK_HTTP],
        signer=assembly.signers(  # the store is made after its deliverer
            app[keys.TENANT_SECRETS], settings, lambda job_id: app[keys.STORE].get(job_id)),
        schedule=retry.Schedule(
            tuple(hooks.retry_delays_s),
            jitter_ratio=hooks.retry_jitter_ratio,
            max_retry_after_s=hooks.max_retry_after_s,
        ),
        notifier=app[keys.NOTIFIER],
        max_concurrency=hooks.max_concurrency,
        max_per_host=hooks.max_per_host,
        operator_signer=assembly.operator_signer(settings),  # docs/webhooks.md
        interval_s=settings.gateway.loop_interval_s,
        metrics=app[keys.METRICS],
        clock=app[keys.CLOCK],
    )
    return sender, Handoff(sender, owner=app[OWNER], lease_s=lease_s)


def _loops(run: bool) -> Callable[[web.Application], AsyncIterator[None]]:
    async def loops(app: web.Application) -> AsyncIterator[None]:
        app[LOOPS] = build_loops(app)
        tasks = [asyncio.create_task(loop.run(), name=loop.name, context=aio.lifecycle_context())
                 for loop in app[LOOPS] if run]  # the lifecycle: reserved connections
        try:
            yield
        finally:
            for loop in app[LOOPS]:
                loop.stop()
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            await app[_EVENTS].release_handed()  # to the next process now, not after a lease
            for loop in app[LOOPS]:  # and the rows handed over as the deliverer stopped
                if isinstance(loop, delivery.Delivery):
                    await loop.release_unsent()

    return loops
