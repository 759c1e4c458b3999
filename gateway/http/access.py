"""The gateway's one middleware: request ids, auth, rate limits, problem+json, and one log
line per request (docs/logging.md, docs/limits.md, docs/replicate-api.md §1, §5.1).

:func:`front_middleware` keeps the caller's ``X-Request-Id`` when it is a sane token (up
to 128 of ``A-Za-z0-9._:-``), else makes one, and returns it on every response (streamed
ones too: their handlers call :func:`add_request_id` before they prepare them); checks the API token
outside :data:`gateway.http.middleware.PUBLIC_PREFIXES` (:class:`ApiTokens`) and notes its
tenant (``TENANT``, docs/security.md); applies
:class:`gateway.http.ratelimit.Limiter` to requests that carry a token; gives request
bodies their read deadline (:mod:`gateway.http.deadline`); turns every error into
problem+json (:func:`gateway.http.middleware.problem_for`); and logs ``request`` with the
method, the route *template* (never a path with ids or capability tokens in it), the
status, the duration, the request id and the API token's name (never the token).

One middleware rather than one per concern: each is a coroutine layer on every request,
and a GET of a finished prediction is otherwise little more than aiohttp's own work
(docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from contracts.errors import CutoverError
from gateway import logs
from gateway.http import deadline
from gateway.http.middleware import (
    ADMIN_ROOT,
    PUBLIC_PREFIXES,
    TENANT,
    TOKEN_NAME,
    ApiTokens,
    Handler,
    problem_for,
)
from gateway.http.ratelimit import Limiter
from gateway.metrics import Metrics

__all__ = ["REQUEST_ID", "RateLimited", "add_request_id", "front_middleware", "route_of"]

log = logging.getLogger("gateway.access")
REQUEST_ID = web.RequestKey("request_id", str)
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_new_id = random.Random().getrandbits  # noqa: S311 (an id to correlate logs, not a secret)


class RateLimited(CutoverError):
    """Too many requests from one API token (429, with ``Retry-After`` seconds)."""

    status = 429
    title = "Too many requests"

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


def route_of(request: web.Request) -> str:
    """The matched route's template (``/v1/predictions/{id}``), or ``unmatched``."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """Give ``response`` the request's id; a handler that prepares (streams) its response
    itself calls this first. :func:`front_middleware` gives it to every response it
    returns unprepared: an ``on_response_prepare`` signal would cost every response a
    coroutine (docs/benchmarks.md)."""
    if REQUEST_ID in request:
        response.headers["X-Request-Id"] = request[REQUEST_ID]


def front_middleware(
    tokens: ApiTokens, limiter: Limiter | None = None, metrics: Metrics | None = None,
    body_read_timeout_s: float = 30.0,
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware of the module docstring; ``limiter`` (with ``metrics`` to count the
    refusals) when rate limits are on; each request body read within
    ``body_read_timeout_s`` of silence (:mod:`gateway.http.deadline`)."""

    @web.middleware
    async def front(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("X-Request-Id")
        if given is None or _REQUEST_ID_RE.fullmatch(given) is None:
            given = f"{_new_id(128):032x}"
        request[REQUEST_ID] = given
        started = time.perf_counter()
        status = 500
        # A request without a body (a GET) needs no read deadline (deadline.watch).
        stop = None if request.content.is_eof() else deadline.watch(request, body_read_timeout_s)
        try:
            try:
                path = request.path
                if not path.startswith(PUBLIC_PREFIXES) and path != ADMIN_ROOT:
                    name = tokens.name_of(request.headers.get("Authorization"))
                    request[TOKEN_NAME] = name
                    request[TENANT] = tokens.tenant_of(name)
                    if limiter is not None:
                        _limit(limiter, metrics, request, name)
                response = await handler(request)
            except Exception as exc:  # noqa: BLE001 (the boundary: no traceback to a client)
                response = problem_for(request, exc)  # re-raises a redirect
            status = response.status
            if not response.prepared:  # else a streamed one: add_request_id set it
                response.headers["X-Request-Id"] = given
            if status >= 400:
                await deadline.close_if_unread(request, response)
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers["X-Request-Id"] = given
            raise
        finally:
            if stop is not None:
                stop()
            _log_request(request, status, started, given)

    return front


def _limit(limiter: Limiter, metrics: Metrics | None, request: web.Request, name: str) -> None:
    """429 for an API token over its bucket; creates and other requests count apart."""
    create = request.method == "POST" and route_of(request).endswith("/predictions")
    kind = "create" if create else "other"
    wait_s = limiter.check(name, kind)
    if wait_s:
        if metrics is not None:
            metrics.rate_limited.labels(name, kind).inc()
        raise RateLimited(
            f"Request was throttled. Expected available in {wait_s} second"
            + ("s." if wait_s != 1 else "."),
            retry_after_s=wait_s,
        )


def _log_request(request: web.Request, status: int, started: float, request_id: str) -> None:
    """The ``request`` line. When :func:`gateway.logs.json_sink` finds the line handler
    alone on the way, the line is made here from pieces kept per method, route and token
    name (:func:`_request_line`), without a ``LogRecord`` or a dict: the same line
    :class:`gateway.logs.JsonFormatter` makes of the record (tests/unit/test_front.py)."""
    if not log.isEnabledFor(logging.INFO):
        return
    duration_ms = round((time.perf_counter() - started) * 1000, 3)
    route = route_of(request)
    name = request.get(TOKEN_NAME)
    sink = logs.json_sink(log, logging.INFO)
    if sink is not None and sink.emit_line(_request_line(
            time.time(), request.method, route, status, duration_ms, request_id, name)):
        return
    logs.info(log, "request", {
        "method": request.method,
        "route": route,
        "status": status,
        "duration_ms": duration_ms,
        "request_id": request_id,
        "token": name,
    })


_MAX_KEPT = 256  # pieces kept at most (a client picks the method: not unbounded)
_heads: dict[tuple[str, str], str] = {}
_tails: dict[str | None, str] = {}


def _request_line(at: float, method: str, route: str, status: int, duration_ms: float,
                  request_id: str, name: str | None) -> str:
    """The ``request`` line as :class:`gateway.logs.JsonFormatter` writes it (``at``: the
    time, seconds since the epoch). ``request_id`` is JSON as it is (a sane
    ``X-Request-Id`` or a made one: ``A-Za-z0-9._:-``); ``duration_ms`` a float rounded
    to thousandths (``repr`` is orjson's text for those)."""
    head = _heads.get((method, route))
    if head is None:
        head = (f'","level":"info","logger":{_json(log.name)},"event":"request",'
                f'"method":{_json(method)},"route":{_json(route)},"status":')
        if len(_heads) < _MAX_KEPT:
            _heads[(method, route)] = head
    tail = _tails.get(name)
    if tail is None:
        tail = f',"token":{_json(name)}}}'
        if len(_tails) < _MAX_KEPT:
            _tails[name] = tail
    return (f'{{"ts":"{logs.iso_time(at)}{head}{status},"duration_ms":{duration_ms!r},'
            f'"request_id":"{request_id}"{tail}')


def _json(value: str | None) -> str:
    """``value`` as JSON, as :class:`gateway.logs.JsonFormatter` writes a field."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # what orjson refuses (a str subclass), as the formatter falls back
        return json.dumps(value, default=str)
