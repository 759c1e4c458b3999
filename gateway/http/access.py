"""The gateway's one middleware: request ids, auth, rate limits, problem+json, and one log
line per request (docs/logging.md, docs/limits.md, docs/replicate-api.md §1, §5.1).

:func:`front_middleware` keeps the caller's ``X-Request-Id`` when it is a sane token (up
to 128 of ``A-Za-z0-9._:-``), else makes one, and returns it on every response (streamed
ones too, through :func:`add_request_id` on ``on_response_prepare``); checks the API token
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

import logging
import random
import re
import time
from collections.abc import Awaitable, Callable

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


async def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every response carries the request id."""
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
        stop = deadline.watch(request, body_read_timeout_s)
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
            await deadline.close_if_unread(request, response)
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers["X-Request-Id"] = given
            raise
        finally:
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
    """The ``request`` line (:func:`gateway.logs.info`: without a ``LogRecord`` when the
    line handler alone writes it; that was a third of a GET's own cost)."""
    if not log.isEnabledFor(logging.INFO):
        return
    logs.info(log, "request", {
        "method": request.method,
        "route": route_of(request),
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        "request_id": request_id,
        "token": request.get(TOKEN_NAME),
    })
