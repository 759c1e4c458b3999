"""The admin API, mounted under ``/admin`` with its own tokens (docs/webhooks.md).

Every request needs ``Authorization: Bearer <token>`` with one of ``[admin] tokens``;
these are not the Replicate API tokens (``/admin/`` is outside the API-token middleware).
With no admin token configured, every admin request is refused with 403. Errors are
problem+json, like the rest of the gateway.

``GET /admin/`` redirects (303) to the console, ``/admin/console/`` (docs/console.md),
which signs people in with its own sessions; a session cookie never authorizes these
routes, and a ``viewer`` token may only read them.

Routes (all JSON):

``GET  /admin/webhooks/dead?since=&until=&limit=``
    dead-lettered events created in ``[since, until)`` (ISO 8601), newest first:
    ``{"results": [event, ...]}``; ``limit`` 1..1000, default 100
``GET  /admin/webhooks/dead/{id}``
    one event (by outbox id or ``msg_...`` webhook id) with its ``payload``
``POST /admin/webhooks/dead/{id}/replay``
    back to ``pending``, due now, attempts reset, same webhook id: the event
``POST /admin/webhooks/dead/replay`` with ``{"since": T, "until": T}``
    replay every dead event created in the range (``until`` defaults to now):
    ``{"replayed": n, "ids": [...]}``
``GET  /admin/webhooks/endpoints``
    endpoints disabled by a 410: ``{"results": [{"url", "disabled_at", "reason"}]}``
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from contracts.auth import bearer_token
from contracts.errors import ContractViolation, Forbidden, Unauthenticated
from contracts.times import parse_time
from gateway.config import AdminSettings
from gateway.http import console, keys, replays
from gateway.http import routes as route_admin
from gateway.http.admintokens import IDENTITY, READ_METHODS, AdminTokens, refuse_viewer
from gateway.http.middleware import Handler, json_object, json_response
from gateway.notify import LoopName
from gateway.webhooks.deadletter import DEFAULT_LIMIT, DeadLetters

__all__ = ["create_admin_app", "mount"]

routes = web.RouteTableDef()


def mount(app: web.Application, settings: AdminSettings) -> None:
    """Add the console (``/admin/console``, people signed in by session, docs/console.md)
    and the admin API (``/admin``, Bearer tokens) to the gateway ``app``."""
    tokens = settings.roles()
    app.add_subapp("/admin/console", console.create_console_app(
        AdminTokens(tokens), idle_s=settings.session_idle_s))
    app.add_subapp("/admin", create_admin_app(tokens))


def create_admin_app(
    tokens: Iterable[str | tuple[str, str] | tuple[str, str, str]],
) -> web.Application:
    """The admin sub-application; mount it with ``app.add_subapp("/admin", ...)``.

    Parameters
    ----------
    tokens : Iterable[str, (name, token) or (name, token, role)]
        Accepted bearer tokens, optionally named (the name is "who" in the route audit,
        docs/canary.md) and given a role (``admin``, the default, or ``viewer``: reads
        only, docs/console.md); none means the admin API answers 403 to everything.
    """
    accepted = AdminTokens(tokens)
    admin = web.Application(middlewares=[_admin_auth(accepted)])
    admin.add_routes(routes)
    admin.add_routes(route_admin.routes)
    admin.add_routes(replays.routes)  # docs/cutover-day.md, "Replaying recorded inputs"
    return admin


def _admin_auth(accepted: AdminTokens) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Bearer tokens only: a console session cookie never authorizes the admin API."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.route.name == "landing":  # people: to the console
            return await handler(request)
        if not accepted:
            raise Forbidden("the admin API is disabled: configure [admin] tokens to use it")
        token = bearer_token(request.headers.get("Authorization"))
        if not token:  # (undecodable bytes compare too: a 401)
            raise Unauthenticated("the admin API needs Authorization: Bearer <admin token>")
        identity = accepted.identify(token)
        if identity is None:
            raise Unauthenticated("that is not a valid admin token")
        if request.method not in READ_METHODS:
            refuse_viewer(identity)
        request[IDENTITY] = identity
        return await handler(request)

    return check


@routes.get("/", name="landing")
async def landing(request: web.Request) -> web.Response:
    """``/admin/`` in a browser: the console (docs/console.md)."""
    raise web.HTTPSeeOther("/admin/console/")


def _letters(request: web.Request) -> DeadLetters:
    return request.config_dict[keys.DEAD_LETTERS]


@routes.get("/webhooks/dead")
async def list_dead(request: web.Request) -> web.Response:
    """List dead-lettered events (filters ``since``, ``until``, ``limit``)."""
    query = request.query
    since = parse_time(query["since"], "since") if "since" in query else None
    until = parse_time(query["until"], "until") if "until" in query else None
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise ContractViolation("limit must be an integer") from None
    letters = await _letters(request).list_dead(since=since, until=until, limit=limit)
    return json_response({"results": [letter.to_json() for letter in letters]})


@routes.post("/webhooks/dead/replay")
async def replay_range(request: web.Request) -> web.Response:
    """Replay every dead event created in ``[since, until)``."""
    body = await json_object(request)
    if not isinstance(body.get("since"), str):
        raise ContractViolation('the body needs "since" (ISO 8601 time)')
    since = parse_time(body["since"], "since")
    until_text = body.get("until")
    if until_text is not None and not isinstance(until_text, str):
        raise ContractViolation('"until" must be an ISO 8601 time')
    until = parse_time(until_text, "until") if until_text else request.config_dict[keys.CLOCK].now()
    ids = await _letters(request).replay_range(since=since, until=until)
    request.config_dict[keys.NOTIFIER].wake(LoopName.DELIVERY)
    return json_response({"replayed": len(ids), "ids": ids})


@routes.get("/webhooks/dead/{ref}")
async def show(request: web.Request) -> web.Response:
    """One event, with its payload."""
    letter = await _letters(request).get(request.match_info["ref"])
    return json_response(letter.to_json())


@routes.post("/webhooks/dead/{ref}/replay")
async def replay_one(request: web.Request) -> web.Response:
    """Replay one dead event."""
    letter = await _letters(request).replay(request.match_info["ref"])
    request.config_dict[keys.NOTIFIER].wake(LoopName.DELIVERY)
    return json_response(letter.to_json())


@routes.get("/webhooks/endpoints")
async def disabled_endpoints(request: web.Request) -> web.Response:
    """Endpoints disabled by a 410 Gone."""
    return json_response({"results": await _letters(request).disabled_endpoints()})

