"""A bound on the prediction reads one process serves at once (``[gateway]
read_concurrency``, docs/lifecycle.md, "Reads and the lifecycle").

``GET /v1/predictions/{id}`` past the bound waits, parked, for a read to finish: what is
runnable on the event loop is at most that many reads and whatever else the process does
(provider webhooks, the event processor, the finalizer, creates), so a turn of the loop
that has thousands of polls waiting does not put each step of the lifecycle behind all of
them. A read that waits keeps its place (FIFO); nothing is refused. Unset: no bound. A
read that is to wait on another server gives its place back first (:mod:`gateway.readslot`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway import readslot
from gateway.http.middleware import Handler

__all__ = ["lanes", "read_lane"]

_READS = "/v1/predictions/"


def read_lane(limit: int) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware holding at most ``limit`` prediction GETs in their handlers at once
    (``GET /v1/predictions/{id}``; not the list, not a stream, not a cancel)."""
    gate = asyncio.Semaphore(limit)

    @web.middleware
    async def lane(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "GET" or not request.path.startswith(_READS):
            return await handler(request)
        await gate.acquire()
        released = False

        def release() -> None:  # once: the handler may give it back early (readslot)
            nonlocal released
            if not released:
                released = True
                gate.release()

        token = readslot.holding(release)
        try:
            return await handler(request)
        finally:
            readslot.reset(token)
            release()

    return lane


def lanes(limit: int | None) -> list[Callable[..., Awaitable[web.StreamResponse]]]:
    """The app's middlewares after the front one: ``[read_lane(limit)]``, none for None."""
    return [] if limit is None else [read_lane(limit)]
