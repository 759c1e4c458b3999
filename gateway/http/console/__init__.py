"""The operator console: server-rendered pages under ``/admin/console`` (docs/console.md).

:func:`create_console_app` builds the sub-application: sign-in and sign-out
(:mod:`.session`), the pages and actions (:mod:`.pages`), its stylesheet and script.
Its middleware lets a request through only with a live session (a page without one
redirects to the sign-in page, a refresh or a change gets a 401), and renders every
refusal as an HTML page with its 4xx status; the admin API beside it stays Bearer-only.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from contracts.errors import CutoverError, Unauthenticated
from gateway.http import keys
from gateway.http.admintokens import AdminTokens
from gateway.http.console import pages, session
from gateway.http.console.render import HEADERS, SIGNED_IN, TEMPLATES, environment, page
from gateway.http.middleware import Handler

__all__ = ["create_console_app"]

_TOKENS = web.AppKey("console_tokens", AdminTokens)
_IDLE_S = web.AppKey("console_idle_s", float)
_STATIC = Path(__file__).with_name("static")
_OPEN = frozenset({"sign_in", "sign_in_form", "static"})  # no session needed
_PASSIVE = frozenset({"overview_live", "route_live"})  # refreshes: the idle clock runs on
_TYPES = {"console.css": "text/css", "console.js": "text/javascript",
          "favicon.svg": "image/svg+xml"}
_FILES = web.AppKey("console_files", dict[str, bytes])

extra = web.RouteTableDef()


def create_console_app(tokens: AdminTokens, *, idle_s: float) -> web.Application:
    """The console; mount it with ``app.add_subapp("/admin/console", ...)``. ``tokens``
    are the admin tokens (with their roles), ``idle_s`` the idle sign-out."""
    console = web.Application(middlewares=[_signed_in_only])
    console[_TOKENS] = tokens
    console[_IDLE_S] = idle_s
    console[TEMPLATES] = environment()
    console[_FILES] = {name: (_STATIC / name).read_bytes() for name in _TYPES}  # at build
    console.add_routes(extra)
    console.add_routes(pages.routes)
    return console


@web.middleware
async def _signed_in_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        name = request.match_info.route.name
        if name not in _OPEN:
            who = await session.signed_in(request, request.app[_TOKENS],
                                          request.config_dict[keys.CONSOLE_SESSIONS],
                                          touch=name not in _PASSIVE)
            if who is None:
                if request.method == "GET" and name not in _PASSIVE:
                    raise web.HTTPSeeOther(f"{session.PREFIX}/sign-in")
                raise Unauthenticated("you are signed out (the session ended, or there is "
                                      "none): sign in again; nothing was changed")
            request[SIGNED_IN] = who
        return await handler(request)
    except CutoverError as exc:
        return page(request, "error.html", status=exc.status, title=exc.title,
                    detail=exc.detail)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return page(request, "error.html", status=exc.status, title=exc.reason,
                    detail="There is no such page in the console.")


def _public_url(request: web.Request) -> str:
    return request.config_dict[keys.EDGE].public_url


@extra.get("/sign-in", name="sign_in_form")
async def sign_in_form(request: web.Request) -> web.StreamResponse:
    sessions = request.config_dict[keys.CONSOLE_SESSIONS]
    if await session.signed_in(request, request.app[_TOKENS], sessions, touch=False):
        raise web.HTTPSeeOther(f"{session.PREFIX}/")
    notice = "You are signed out." if "signed-out" in request.query else None
    return page(request, "sign_in.html", idle_min=round(request.app[_IDLE_S] / 60),
                notice=notice, error=None)


@extra.post("/sign-in", name="sign_in")
async def sign_in(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    response = web.HTTPSeeOther(f"{session.PREFIX}/")
    try:
        if not isinstance(token, str) or not token.strip():
            raise Unauthenticated("give an admin token to sign in")
        await session.sign_in(request, response, token, request.app[_TOKENS],
                              request.config_dict[keys.CONSOLE_SESSIONS], _public_url(request))
    except CutoverError as exc:
        return page(request, "sign_in.html", status=exc.status, error=exc.detail, notice=None,
                    idle_min=round(request.app[_IDLE_S] / 60))
    raise response


@extra.post("/sign-out", name="sign_out")
async def sign_out(request: web.Request) -> web.StreamResponse:
    who = request[SIGNED_IN]
    form = await request.post()
    csrf = form.get("csrf")
    session.check_change(request, who, csrf if isinstance(csrf, str) else None,
                         _public_url(request))
    response = web.HTTPSeeOther(f"{session.PREFIX}/sign-in?signed-out")
    await session.sign_out(request, response, who, request.config_dict[keys.CONSOLE_SESSIONS],
                           _public_url(request))
    raise response


@extra.get("/static/{file}", name="static")
async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    if name not in _TYPES:
        raise web.HTTPNotFound()
    headers = {**HEADERS, "Cache-Control": "no-cache"}
    return web.Response(body=request.app[_FILES][name], content_type=_TYPES[name],
                        charset="utf-8", headers=headers)
