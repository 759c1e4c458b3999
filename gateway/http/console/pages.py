"""The console's pages and actions (docs/console.md), under ``/admin/console``.

``GET  /``                               every route: arms, percents, guard state, audit
``GET  /live``                           the routes table alone (refreshed by the page)
``GET  /routes/{route}``                 one route: live figures, guard, audit, actions
``GET  /routes/{route}/live``            its live figures alone (refreshed by the page)
``GET  /routes/{route}/shadow-report``   its shadow-diff report (the HTML report page)
``POST /routes/{route}/{action}``        canary, shadow, rollback, promote, pause-guard,
                                         resume-guard: a form with ``reason`` and ``csrf``
``POST /routes/{route}/replay``          start a replay of recorded inputs: ``since``,
                                         ``limit``, ``baseline_percent`` and ``csrf``
``GET  /routes/{route}/replays/live``    the newest replay's progress (refreshed by the page)
``POST /routes/{route}/replays/{id}/stop``, ``.../resume``   stop or resume it (``csrf``)
``GET  /routes/{route}/replays/{id}/report``  its shadow report (the HTML report page)

Every action goes through :class:`gateway.rollout.control.RouteControl` (a replay's
through :class:`gateway.rollout.replay.ReplayControl`), the service the admin API and
``cutover routes`` (``cutover shadow replay``) use, with the same checks; a refused one
re-renders the page with the reason and its 4xx status, and changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from contracts.errors import CutoverError, NotFound
from gateway.http import keys
from gateway.http.admintokens import Identity, refuse_viewer
from gateway.http.console import views
from gateway.http.console.render import SIGNED_IN, page, report_response, template_response
from gateway.http.console.session import PREFIX, check_change

__all__ = ["routes"]

routes = web.RouteTableDef()
_ROUTE = "/routes/{owner}/{name}"
_AUDIT_ROWS = 15


def _key(request: web.Request) -> str:
    return f"{request.match_info['owner']}/{request.match_info['name']}"


def _href(key: str) -> str:
    return f"{PREFIX}/routes/{key}"


def _change(c: dict[str, Any]) -> dict[str, Any]:
    at = datetime.fromisoformat(c["at"])
    kind = c["who"] if c["who"] in ("guard", "config", "cli") else "person"
    return {**c, "moved": views.change_summary(c), "href": _href(c["route"]),
            "at_text": f"{at:%Y-%m-%d %H:%M:%S} UTC", "who_kind": kind}


async def _overview_rows(request: web.Request) -> list[dict[str, Any]]:
    control = request.config_dict[keys.ROUTES].control
    rows = []
    for item in await control.listing():
        shown = await control.describe(item["route"], history=0)
        candidate = shown["arms"].get("candidate")
        ctrl = shown["arms"]["control"]
        rows.append({
            "route": item["route"], "href": _href(item["route"]), "spec": shown["spec"],
            "guard": views.guard_view(shown),
            "cand_errors": views.pct(candidate["error_rate"]) if candidate else views.NONE,
            "cand_p95": views.ms(candidate["p95_s"]) if candidate else views.NONE,
            "ctrl_p95": views.ms(ctrl["p95_s"]),
            "stuck": candidate["stuck"] if candidate else views.NONE,
        })
    return rows


@routes.get("/", name="overview")
async def overview(request: web.Request) -> web.Response:
    """Every route, and the recent audit of all."""
    changes = await request.config_dict[keys.ROUTES].control.history(None, _AUDIT_ROWS)
    return page(request, "overview.html", page="overview", rows=await _overview_rows(request),
                changes=[_change(c) for c in changes])


@routes.get("/live", name="overview_live")
async def overview_live(request: web.Request) -> web.Response:
    return template_response(request, "_routes.html", rows=await _overview_rows(request))


async def _route_context(request: web.Request, key: str) -> dict[str, Any]:
    shown = await request.config_dict[keys.ROUTES].control.describe(key, history=50)
    arms = []
    for arm, s in shown["arms"].items():
        arms.append({"arm": arm, "provider": s["provider"], "count": s["count"],
                     "failed": s["failed"], "stuck": s["stuck"], "rate": views.pct(s["error_rate"]),
                     "p50": views.ms(s["p50_s"]), "p95": views.ms(s["p95_s"])})
    return {"route": key, "spec": shown["spec"], "window_s": shown["window_s"], "arms": arms,
            "since": shown.get("since"),
            "guard": views.guard_view(shown), "changes": [_change(c) for c in shown["changes"]]}


@routes.get(_ROUTE, name="route")
async def route_page(request: web.Request) -> web.Response:
    """One route; ``?done=ID`` names the change just applied."""
    key = _key(request)
    context = await _route_context(request, key)
    done = request.query.get("done")
    applied = next((c for c in context["changes"] if str(c["id"]) == done), None)
    return page(request, "route.html", page="route", done=applied,
                replay=await _latest_replay(request, key), **context)


@routes.get(_ROUTE + "/live", name="route_live")
async def route_live(request: web.Request) -> web.Response:
    return template_response(request, "_route_live.html", **await _route_context(request,
                                                                                 _key(request)))


@routes.get(_ROUTE + "/shadow-report", name="shadow_report")
async def shadow_report(request: web.Request) -> web.Response:
    """The route's HTML shadow-diff report (its own CSP, framed only by the console)."""
    key = _key(request)
    services = request.config_dict[keys.ROUTES]
    spec = await services.control.spec(key)
    return report_response(await services.pairs.report(key, spec, fmt="html"))


_ACTIONS = ("canary", "shadow", "rollback", "promote", "pause-guard", "resume-guard",
            "replay")


async def _latest_replay(request: web.Request, key: str) -> dict[str, Any] | None:
    found = await request.config_dict[keys.ROUTES].replay.listing(key)
    return found[0].to_json() if found else None


@routes.get(_ROUTE + "/replays/live", name="replay_live")
async def replay_live(request: web.Request) -> web.Response:
    """The newest replay's progress, for the route page's Replay card."""
    key = _key(request)
    return template_response(request, "_replay_live.html", route=key,
                             replay=await _latest_replay(request, key))


@routes.get(_ROUTE + "/replays/{id}/report", name="replay_report")
async def replay_report(request: web.Request) -> web.Response:
    """A replay's HTML shadow report (under the report's own CSP)."""
    key = _key(request)
    services = request.config_dict[keys.ROUTES]
    replay = await services.replay.get(key, request.match_info["id"])
    spec = await services.control.spec(key)
    return report_response(await services.pairs.report(key, spec, fmt="html", replay=replay))


@routes.post(_ROUTE + "/replays/{id}/{verb}", name="replay_action")
async def replay_action(request: web.Request) -> web.StreamResponse:
    """Stop or resume a replay; 303 back to the route page, or the page with the 4xx."""
    key, verb = _key(request), request.match_info["verb"]
    if verb not in ("stop", "resume"):
        raise NotFound(f"the console has no replay action {verb!r}")
    form = await request.post()
    who = request[SIGNED_IN]
    check_change(request, who, _field(form, "csrf"), request.config_dict[keys.EDGE].public_url)
    replays = request.config_dict[keys.ROUTES].replay
    try:
        refuse_viewer(who.identity)
        act = replays.stop if verb == "stop" else replays.resume
        await act(key, request.match_info["id"])
    except CutoverError as exc:
        if isinstance(exc, NotFound):
            raise
        return await _refused(request, key, exc)
    raise web.HTTPSeeOther(_href(key))


async def _refused(request: web.Request, key: str, exc: CutoverError) -> web.Response:
    """The route page again with a refused action's reason and its 4xx status."""
    context = await _route_context(request, key)
    return page(request, "route.html", page="route", status=exc.status, error=exc.detail,
                error_title=exc.title, replay=await _latest_replay(request, key), **context)


def _optional_number(form: Any, name: str, kind: type[int] | type[float]) -> Any:
    """A form's number field: None when empty, the number, else the text itself (which
    the replay control refuses with its reason)."""
    text = (_field(form, name) or "").strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        return text


@routes.post(_ROUTE + "/{action}", name="action")
async def act(request: web.Request) -> web.StreamResponse:
    """Apply one action; 303 back to the route page, or the page again with the 4xx."""
    key, action = _key(request), request.match_info["action"]
    if action not in _ACTIONS:
        raise NotFound(f"the console has no action {action!r}")
    form = await request.post()
    who = request[SIGNED_IN]
    public_url = request.config_dict[keys.EDGE].public_url
    check_change(request, who, _field(form, "csrf"), public_url)  # 403 before anything
    try:
        if action == "replay":
            refuse_viewer(who.identity)
            await request.config_dict[keys.ROUTES].replay.start(
                key, since=_field(form, "since") or None,
                limit=_optional_number(form, "limit", int),
                baseline_percent=_optional_number(form, "baseline_percent", float),
                who=who.identity.name)
            raise web.HTTPSeeOther(_href(key))
        entry = await _apply(request, key, action, form, who.identity)
    except CutoverError as exc:
        if isinstance(exc, NotFound):
            raise
        return await _refused(request, key, exc)
    await request.config_dict[keys.ROUTES].sync.reload()  # live in this process at once
    raise web.HTTPSeeOther(f"{_href(key)}?done={entry.id}")


async def _apply(request: web.Request, key: str, action: str, form: Any,
                 identity: Identity) -> Any:
    refuse_viewer(identity)
    control = request.config_dict[keys.ROUTES].control
    reason = _field(form, "reason") or ""
    who = identity.name
    if action == "canary":
        return await control.set_canary(key, _field(form, "percent"), who=who, reason=reason)
    if action == "shadow":
        return await control.set_shadow(key, _field(form, "percent"), who=who, reason=reason)
    act = {"rollback": control.rollback, "promote": control.promote,
           "pause-guard": control.pause_guard, "resume-guard": control.resume_guard}[action]
    return await act(key, who=who, reason=reason)


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None

