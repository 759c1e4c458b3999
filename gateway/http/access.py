"""Request ids, one log line per request, and per-token rate limits (docs/logging.md,
docs/limits.md).

``access_middleware`` (outermost) keeps the caller's ``X-Request-Id`` when it is a sane
token (up to 128 of ``A-Za-z0-9._:-``), else makes one, returns it on every response
(streamed ones too, through ``on_response_prepare``), and logs ``request`` with the
method, the route *template* (never a path with ids or capability tokens in it), the
status, the duration, the request id and the API token's name (never the token).
``limit_middleware`` (after auth) applies :class:`gateway.ratelimit.Limiter`.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from contracts.errors import CutoverError
from gateway.http.middleware import TOKEN_NAME, Handler
from gateway.metrics import Metrics
from gateway.ratelimit import Limiter

__all__ = ["REQUEST_ID", "RateLimited", "access_middleware", "limit_middleware", "route_of"]

log = logging.getLogger("gateway.access")
REQUEST_ID = web.RequestKey("request_id", str)
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


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


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get("X-Request-Id", "")
    request_id = given if _REQUEST_ID_RE.match(given) else secrets.token_hex(16)
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        exc.headers["X-Request-Id"] = request_id
        raise
    finally:
        log.info(
            "request",
            extra={
                "method": request.method,
                "route": route_of(request),
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                "request_id": request_id,
                "token": request.get(TOKEN_NAME),
            },
        )


def limit_middleware(
    limiter: Limiter, metrics: Metrics
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """429 for an API token over its bucket; creates and other requests count apart."""

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        name = request.get(TOKEN_NAME)
        if name is None:  # public routes carry no token
            return await handler(request)
        create = request.method == "POST" and route_of(request).endswith("/predictions")
        kind = "create" if create else "other"
        wait_s = limiter.check(name, kind)
        if wait_s:
            metrics.rate_limited.labels(name, kind).inc()
            raise RateLimited(
                f"Request was throttled. Expected available in {wait_s} second"
                + ("s." if wait_s != 1 else "."),
                retry_after_s=wait_s,
            )
        return await handler(request)

    return limit
