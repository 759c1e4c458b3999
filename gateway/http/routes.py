"""The admin API's routes endpoints (docs/canary.md), under ``/admin`` with admin tokens.

A route is addressed as ``/admin/routes/{owner}/{name}`` where ``{name}`` may carry the
version (``acme/echo:5c7d...``), i.e. the route's name as written in the config.
Every change needs a JSON body with a non-empty ``reason``; it is audited with the admin
token's name as "who"; a ``viewer`` token's change is a 403 (docs/console.md). Bad input
is a problem+json 4xx and changes nothing.

``GET  /admin/routes``                         every route and its spec
``GET  /admin/routes/{route}``                 spec, per-arm numbers, recent changes
``GET  /admin/routes/{route}/changes?limit=``  the route's audit trail, newest first
``GET  /admin/route-changes?limit=``           every route's audit trail, newest first
``POST /admin/routes/{route}/canary``          ``{"percent": 0-100, "reason": "..."}``
``POST /admin/routes/{route}/rollback``        ``{"reason": "..."}``
``POST /admin/routes/{route}/shadow``          ``{"percent": 0-100, "reason": "..."}``
``POST /admin/routes/{route}/promote``         ``{"reason": "..."}``: candidate -> control
``POST /admin/routes/{route}/pause-guard``     ``{"reason": "..."}`` (409: none, or paused)
``POST /admin/routes/{route}/resume-guard``    ``{"reason": "..."}`` (409: not paused)
``PATCH /admin/routes/{route}``                ``{"reason": "...", <spec fields>...}``
``GET  /admin/routes/{route}/shadow-report?since=&format=``
    the shadow-diff report (docs/shadow.md): ``html`` (default; one offline page),
    ``md`` or ``json``
``GET  /admin/predictions/{id}``               which tenant, route, arm and provider own it,
                                               its error and raw output (conformance)
``GET  /admin/predictions?tenant=&cursor=``    every tenant's predictions (or one tenant's),
    newest first, 100 a page, each with its tenant (docs/security.md)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from aiohttp import web

from contracts.errors import ContractViolation
from contracts.job import Job
from gateway import wire
from gateway.http import keys
from gateway.http.admintokens import IDENTITY
from gateway.http.middleware import json_object, json_response
from gateway.rollout.control import RouteControl
from gateway.rollout.shadowgate import skip_of
from gateway.rollout.shadowpairs import report_since

__all__ = ["routes"]

routes = web.RouteTableDef()
_ROUTE = "/routes/{owner}/{name}"
MAX_LIMIT = 1000


def _control(request: web.Request) -> RouteControl:
    return request.config_dict[keys.ROUTES].control


def _key(request: web.Request) -> str:
    return f"{request.match_info['owner']}/{request.match_info['name']}"


def _who(request: web.Request) -> str:
    """The name of the admin token the (already authenticated) request presented."""
    return request[IDENTITY].name


def _limit(request: web.Request, default: int = 100) -> int:
    try:
        limit = int(request.query.get("limit", default))
    except ValueError:
        raise ContractViolation("limit must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ContractViolation(f"limit must be from 1 to {MAX_LIMIT}")
    return limit


async def _body(request: web.Request, takes: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The JSON object of a route change; with ``takes``, no field but those and
    ``reason`` (a misspelt ``"percnet"`` beside ``"percent"`` was ignored, answered 200)."""
    body = await json_object(request)
    if not isinstance(body.get("reason"), str) or not body["reason"].strip():
        raise ContractViolation('a route change needs a non-empty "reason"')
    if takes is not None and (unknown := sorted(set(body) - {"reason", *takes})):
        wanted = " and ".join(f'"{name}"' for name in (*takes, "reason"))
        raise ContractViolation(f"unknown field(s) {', '.join(unknown)}: this change takes "
                                f"{wanted}")
    return body


async def _changed(request: web.Request, entry: Any) -> web.Response:
    await request.config_dict[keys.ROUTES].sync.reload()  # live in this process at once
    return json_response(entry.model_dump(mode="json"))


@routes.get("/routes")
async def list_routes(request: web.Request) -> web.Response:
    """Every route and its spec."""
    return json_response({"results": await _control(request).listing()})


@routes.get("/route-changes")
async def all_changes(request: web.Request) -> web.Response:
    """Every route's audit trail, newest first."""
    entries = await _control(request).history(None, _limit(request))
    return json_response({"results": entries})


@routes.get(_ROUTE)
async def show_route(request: web.Request) -> web.Response:
    """One route: spec, per-arm numbers, recent changes."""
    return json_response(await _control(request).describe(_key(request)))


@routes.get(_ROUTE + "/changes")
async def route_changes(request: web.Request) -> web.Response:
    """One route's audit trail."""
    entries = await _control(request).history(_key(request), _limit(request))
    return json_response({"results": entries})


@routes.post(_ROUTE + "/canary")
async def set_canary(request: web.Request) -> web.Response:
    """Set the canary percent."""
    body = await _body(request, takes=("percent",))
    if "percent" not in body:
        raise ContractViolation('the body needs "percent" (0 to 100)')
    entry = await _control(request).set_canary(
        _key(request), body["percent"], who=_who(request), reason=body["reason"]
    )
    return await _changed(request, entry)


@routes.post(_ROUTE + "/rollback")
async def rollback(request: web.Request) -> web.Response:
    """Canary back to 0."""
    body = await _body(request, takes=())
    entry = await _control(request).rollback(_key(request), who=_who(request),
                                             reason=body["reason"])
    return await _changed(request, entry)


@routes.post(_ROUTE + "/promote")
async def promote(request: web.Request) -> web.Response:
    """The candidate becomes the control at 100 %; the route has no candidate after."""
    body = await _body(request, takes=())
    entry = await _control(request).promote(_key(request), who=_who(request),
                                            reason=body["reason"])
    return await _changed(request, entry)


@routes.post(_ROUTE + "/pause-guard")
async def pause_guard(request: web.Request) -> web.Response:
    """The guard keeps counting but never rolls back, until resumed."""
    body = await _body(request, takes=())
    entry = await _control(request).pause_guard(_key(request), who=_who(request),
                                                reason=body["reason"])
    return await _changed(request, entry)


@routes.post(_ROUTE + "/resume-guard")
async def resume_guard(request: web.Request) -> web.Response:
    """A paused guard acts again."""
    body = await _body(request, takes=())
    entry = await _control(request).resume_guard(_key(request), who=_who(request),
                                                 reason=body["reason"])
    return await _changed(request, entry)


@routes.post(_ROUTE + "/shadow")
async def set_shadow(request: web.Request) -> web.Response:
    """Set the shadow percent."""
    body = await _body(request, takes=("percent",))
    if "percent" not in body:
        raise ContractViolation('the body needs "percent" (0 to 100)')
    entry = await _control(request).set_shadow(
        _key(request), body["percent"], who=_who(request), reason=body["reason"]
    )
    return await _changed(request, entry)


@routes.patch(_ROUTE)
async def patch_route(request: web.Request) -> web.Response:
    """Change any spec fields (guard thresholds, shadow policy and budget, caller key...)."""
    body = await _body(request)
    reason = body.pop("reason")
    if not body:
        raise ContractViolation("nothing to change: name at least one route field")
    entry = await _control(request).change(_key(request), body, who=_who(request),
                                           reason=reason)
    return await _changed(request, entry)


_REPORT_TYPES = {"html": "text/html", "md": "text/markdown", "json": "application/json"}


@routes.get(_ROUTE + "/shadow-report")
async def shadow_report(request: web.Request) -> web.Response:
    """The route's shadow-diff report page."""
    key = _key(request)
    fmt = request.query.get("format", "html")
    if fmt not in _REPORT_TYPES:
        raise ContractViolation(f"format must be one of {', '.join(_REPORT_TYPES)}")
    since = report_since(request.query.get("since"), "since")
    spec = await _control(request).spec(key)
    body = await request.config_dict[keys.ROUTES].pairs.report(key, spec, since=since,
                                                                fmt=fmt)  # type: ignore[arg-type]
    return web.Response(text=body, content_type=_REPORT_TYPES[fmt], charset="utf-8")


@routes.get("/predictions/{id}")
async def prediction_owner(request: web.Request) -> web.Response:
    """Which tenant, route, arm and provider own a prediction (never shown to apps)."""
    job = await request.config_dict[keys.STORE].get(request.match_info["id"])
    shadows = await request.config_dict[keys.ROUTES].shadows.shadows_of(job.id)
    return json_response(
        {
            "id": job.id,
            "tenant": job.tenant,
            "route": job.route,
            "arm": job.arm,
            "provider": job.provider,
            "provider_job_id": job.provider_job_id,
            "state": job.state.value,
            "raw_status": job.raw_status,  # e.g. not_connected: its last submit found no one
            "error": job.error,
            # the provider's output when it failed the model's Output schema (conformance)
            "raw_output": job.raw_output,
            "shadow_of": job.shadow_of,
            "shadows": [_shadow(s) for s in shadows],
        }
    )


def _shadow(job: Job) -> dict[str, Any]:
    """One of a primary's shadows: ``{"id", "arm", "provider", "state", "skipped"}``,
    ``skipped`` None for a shadow that reached its provider (or still may), else
    ``{"reason", "error"}``: a skip row (docs/shadow.md, "Skips"; the report's reasons,
    :func:`gateway.rollout.shadowgate.skip_of`) is no shadow prediction, and was listed
    as one, ``canceled`` or ``failed`` among them. A shadow canceled with its primary
    before it was sent is no skip: it stays ``canceled``, ``skipped`` None."""
    reason = None
    if job.submitted_at is None and job.state.terminal:
        reason = skip_of(job.state, job.error)
    return {"id": job.id, "arm": job.arm, "provider": job.provider, "state": job.state.value,
            "skipped": None if reason is None else {"reason": reason, "error": job.error}}


@routes.get("/predictions")
async def every_prediction(request: web.Request) -> web.Response:
    """One page of every tenant's predictions (``?tenant=`` one tenant's), newest first:
    ``{"next": URL or null, "results": [{"id", "tenant", "route", "arm", "provider",
    "state", "created_at"}]}``; ``next`` carries the ``cursor``."""
    tenant = request.query.get("tenant") or None
    page = await request.config_dict[keys.PREDICTIONS].page(
        request.query.get("cursor"), tenant=tenant)
    next_url = None
    if page.next_url is not None:
        cursor = parse_qs(urlsplit(page.next_url).query)["cursor"][0]
        query = {"cursor": cursor, **({"tenant": tenant} if tenant else {})}
        next_url = f"{request.config_dict[keys.EDGE].public_url}/admin/predictions?" \
            + urlencode(query)
    results = [
        {"id": j.id, "tenant": j.tenant, "route": j.route, "arm": j.arm,
         "provider": j.provider, "state": j.state.value, "created_at": wire.timestamp(j.created_at)}
        for j in page.jobs
    ]
    return json_response({"next": next_url, "results": results})
