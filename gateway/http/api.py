"""The Replicate-compatible HTTP API (docs/replicate-api.md §2, §3, §9).

Handlers are thin: parse into a contract, call :class:`gateway.predictions.PredictionService`,
serialise. Every route is served under ``/v1`` and without it (§1: a JS app configured
without ``/v1`` calls ``/predictions``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from contracts.auth import DEFAULT_TENANT
from contracts.errors import ContractViolation, NotFound
from contracts.replicate import (
    Account,
    CreatePrediction,
    Deployment,
    Model,
    ModelPredictionRequest,
    PredictionRequest,
    Version,
    WebhookSecret,
    check_model_name,
    parse_version_ref,
)
from contracts.times import parse_time
from gateway import wire
from gateway.config import RouteSettings
from gateway.http import keys
from gateway.http.files import FILES
from gateway.http.middleware import (
    SCOPE_CHARS,
    TENANT,
    TOKEN_NAME,
    Handler,
    json_response,
    parse_body,
    presented_token,
    token_scope,
)
from gateway.predictions import (
    CreateOptions,
    PredictionService,
    parse_cancel_after,
    parse_prefer_wait,
)

__all__ = ["routes"]

routes = web.RouteTableDef()
_PREFIXES = ("/v1", "")
# The store keeps "<16 hex of the token's SHA-256>:<key>" in a 255-character column.
MAX_IDEMPOTENCY_KEY_CHARS = 255 - SCOPE_CHARS - 1
_IDEMPOTENCY_KEY_RE = re.compile(r"[\x20-\x7e]+")  # printable ASCII
# GET's answer headers, made once: aiohttp would build the Content-Type from
# content_type and charset on every response (docs/benchmarks.md)
_JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}


def _route(method: str, path: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for prefix in _PREFIXES:
            routes.route(method, prefix + path)(handler)
        return handler

    return register


def _service(request: web.Request) -> PredictionService:
    return request.app[keys.PREDICTIONS]


def _tenant(request: web.Request) -> str:
    """The caller's tenant (the middleware's, docs/security.md): all it may see."""
    return request.get(TENANT, DEFAULT_TENANT)


def _options(request: web.Request) -> CreateOptions:
    """The create headers, parsed.

    ``Idempotency-Key`` is at most :data:`MAX_IDEMPOTENCY_KEY_CHARS` (238) printable ASCII
    characters, and belongs to the API token that presents it: the same key under another
    token is another key.

    Raises
    ------
    ContractViolation
        A malformed ``Idempotency-Key`` or ``Cancel-After``.
    """
    settings = request.app[keys.EDGE]
    key = request.headers.get("Idempotency-Key") or None
    if key is not None and len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise ContractViolation(
            f"Idempotency-Key is longer than {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )
    if key is not None and not _IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise ContractViolation(
            "Idempotency-Key must be printable ASCII (letters, digits, punctuation, spaces)"
        )
    return CreateOptions(
        idempotency_key=key,
        idempotency_scope=token_scope(request) if key is not None else "",
        wait_s=parse_prefer_wait(request.headers.get("Prefer"), settings.prefer_wait_max_s),
        cancel_after_s=parse_cancel_after(
            request.headers.get("Cancel-After"), settings.max_job_lifetime_s
        ),
        token_name=request.get(TOKEN_NAME),
        token=presented_token(request),  # the sticky canary's default caller key
        headers=request.headers,
        tenant=_tenant(request),
    )



def _model_name(request: web.Request) -> str:
    try:
        return check_model_name(request.match_info["owner"], request.match_info["name"])
    except ValueError as exc:
        raise NotFound(str(exc)) from exc


def _create(body: ModelPredictionRequest | PredictionRequest, **target: Any) -> CreatePrediction:
    webhook, events = body.webhook, body.webhook_events_filter
    if webhook is None and body.webhook_completed is not None:
        webhook, events = body.webhook_completed, ["completed"]
    return CreatePrediction(
        input=body.input,
        webhook=webhook,
        webhook_events_filter=events,
        stream=bool(body.stream),
        **target,
    )


async def _respond_created(
    request: web.Request, create: CreatePrediction, target: str
) -> web.Response:
    options = _options(request)
    service = _service(request)
    owners = request.app[keys.FILE_OWNERS]
    if owners:  # with [[tenants]]: no file of another tenant (docs/security.md)
        await request.app[FILES].check_owned(create.input, owners.get(options.tenant, ()))
    job, created = await service.create(create, options, target)
    if created:
        request.app[keys.METRICS].predictions_created.labels(job.route, job.provider).inc()
    status = None
    if options.wait_s is not None:
        job = await service.wait(job, options.wait_s)
        status = None if job.state.terminal else "starting"
    body = service.prediction(job, status=status)
    headers = {"Location": body["urls"]["get"]}
    if not created:
        headers["Idempotent-Replayed"] = "true"
    return json_response(body, status=201, headers=headers)


@_route("POST", "/predictions")
async def create_prediction(request: web.Request) -> web.Response:
    """``POST /v1/predictions`` with ``version`` in any of its three forms (§2.1)."""
    body = await parse_body(request, PredictionRequest)
    try:
        model, version_id = parse_version_ref(body.version)
    except ValueError as exc:
        raise ContractViolation(str(exc)) from exc
    create = _create(body, model=model, version_id=version_id)
    return await _respond_created(request, create, "predictions")


@_route("POST", "/models/{owner}/{name}/predictions")
async def create_model_prediction(request: web.Request) -> web.Response:
    """``POST /v1/models/{owner}/{name}/predictions`` (official models, §2.2)."""
    model = _model_name(request)
    body = await parse_body(request, ModelPredictionRequest)
    return await _respond_created(request, _create(body, model=model), f"models/{model}")


@_route("POST", "/deployments/{owner}/{name}/predictions")
async def create_deployment_prediction(request: web.Request) -> web.Response:
    """``POST /v1/deployments/{owner}/{name}/predictions`` (§2.3)."""
    name = _model_name(request)
    body = await parse_body(request, ModelPredictionRequest)
    return await _respond_created(request, _create(body, deployment=name), f"deployments/{name}")


@_route("GET", "/predictions/{id}")
async def get_prediction(request: web.Request) -> web.Response:
    """``GET /v1/predictions/{id}`` (§2.4)."""
    body = await _service(request).get_json(request.match_info["id"], _tenant(request))
    return web.Response(body=body, headers=_JSON_HEADERS)


@_route("POST", "/predictions/{id}/cancel")
async def cancel_prediction(request: web.Request) -> web.Response:
    """``POST /v1/predictions/{id}/cancel``: 200 with the current state, idempotent (§2.6)."""
    service = _service(request)
    job = await service.cancel(request.match_info["id"], _tenant(request))
    return json_response(service.prediction(job))


@_route("GET", "/predictions")
async def list_predictions(request: web.Request) -> web.Response:
    """``GET /v1/predictions``: newest first, 100 a page, absolute cursors (§2.5)."""
    service = _service(request)
    page = await service.page(
        request.query.get("cursor"),
        created_after=_when(request, "created_after"),
        created_before=_when(request, "created_before"),
        tenant=_tenant(request),
    )
    # Each result's bytes as GET makes them (a finished one's made once), joined as they are.
    body = b"".join(
        [
            b'{"next":', wire.dumps(page.next_url),
            b',"previous":', wire.dumps(page.previous_url),
            b',"results":[', b",".join(service.render(job) for job in page.jobs), b"]}",
        ]
    )
    return web.Response(body=body, content_type="application/json", charset="utf-8")


def _when(request: web.Request, name: str) -> datetime | None:
    value = request.query.get(name)
    return None if value is None else parse_time(value, name, naive_is_utc=False)


@_route("GET", "/models/{owner}/{name}")
async def get_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{owner}/{name}`` (§2.7): a Model the Python client accepts."""
    model = _model_name(request)
    router = request.app[keys.ROUTER]
    found = router.model_routes(model, _tenant(request))
    if not found:
        raise NotFound(f"model {model!r} is not routed by this gateway")
    base = request.app[keys.EDGE].public_url
    owner, name = model.split("/")
    # A version-less route is the model's latest version too (langchain-community reads
    # latest_version.openapi_schema); its id stands for "whatever the route serves".
    latest = next((r for r in found if r.version), found[0])
    version_id = latest.version or _latest_id(model)
    body = Model(
        url=f"{base}/v1/models/{model}",
        owner=owner,
        name=name,
        description=f"{model}, served through cutover",
        latest_version=(await _version(request, version_id, latest)).model_dump(),
    )
    return json_response(body.model_dump())


@_route("GET", "/models/{owner}/{name}/versions")
async def list_versions(request: web.Request) -> web.Response:
    """``GET /v1/models/{owner}/{name}/versions``: the routed versions of the model."""
    model = _model_name(request)
    found = request.app[keys.ROUTER].model_routes(model, _tenant(request))
    if not found:
        raise NotFound(f"model {model!r} is not routed by this gateway")
    results = [(await _version(request, r.version, r)).model_dump() for r in found if r.version]
    return json_response({"next": None, "previous": None, "results": results})


@_route("GET", "/models/{owner}/{name}/versions/{version}")
async def get_version(request: web.Request) -> web.Response:
    """``GET /v1/models/{o}/{n}/versions/{id}`` (§2.7): ``run()`` calls it after creating."""
    model = _model_name(request)
    version_id = request.match_info["version"]
    for route in request.app[keys.ROUTER].model_routes(model, _tenant(request)):
        if route.version == version_id or route.version is None:
            return json_response((await _version(request, version_id, route)).model_dump())
    raise NotFound(f"version {version_id!r} of {model!r} is not routed by this gateway")


async def _version(request: web.Request, version_id: str, route: RouteSettings) -> Version:
    """The version object; its schema is the one inputs are validated against, or one
    that says the model's schema is unknown (never an empty ``properties``)."""
    schema = await request.app[keys.SCHEMAS].document(route)
    return Version(
        id=version_id,
        created_at=wire.timestamp(request.app[keys.STARTED_AT]) or "",
        cog_version="0.23.1",
        openapi_schema=schema or _UNKNOWN_SCHEMA,
    )


def _latest_id(model: str) -> str:
    """The version id a version-less route reports: 64 hex digits, stable per model."""
    return hashlib.sha256(f"cutover:latest:{model}".encode()).hexdigest()


_UNKNOWN = (
    "cutover does not know this model's schema: set openapi_schema on its route "
    "(docs/validation.md); `cutover check` lists such routes"
)
_UNKNOWN_SCHEMA: dict[str, Any] = {
    "openapi": "3.0.2",
    "info": {"title": "Cog", "version": "0.1.0", "description": _UNKNOWN},
    "paths": {},
    "components": {"schemas": {"Input": {"type": "object", "title": "Input",
                                         "description": _UNKNOWN},
                               "Output": {"title": "Output", "description": _UNKNOWN}}},
}


@_route("GET", "/deployments/{owner}/{name}")
async def get_deployment(request: web.Request) -> web.Response:
    """``GET /v1/deployments/{owner}/{name}`` (§2.8)."""
    name = _model_name(request)
    route = request.app[keys.ROUTER].deployment_route(name, _tenant(request))
    owner, short = name.split("/")
    release = {
        "number": 1,
        "model": route.model,
        "version": route.version or "hidden",
        "created_at": wire.timestamp(request.app[keys.STARTED_AT]),
        "created_by": Account(username=owner, name=owner).model_dump(),  # Python needs name
        "configuration": {"hardware": "cutover", "min_instances": 0, "max_instances": 1},
    }
    body = Deployment(owner=owner, name=short, current_release=release)
    return json_response(body.model_dump())


@_route("GET", "/account")
async def get_account(request: web.Request) -> web.Response:
    """``GET /v1/account`` (§2.12): the token-check probe apps use."""
    username = request.app[keys.EDGE].account_username
    return json_response(Account(username=username, name=username).model_dump())


@_route("GET", "/webhooks/default/secret")
async def get_webhook_secret(request: web.Request) -> web.Response:
    """``GET /v1/webhooks/default/secret`` (§2.10): the key the caller's tenant's webhooks
    are signed with (each tenant its own, docs/security.md)."""
    key = request.app[keys.TENANT_SECRETS][_tenant(request)]
    return json_response(WebhookSecret(key=key).model_dump())
