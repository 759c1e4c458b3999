"""The read deadline of request bodies (docs/limits.md, "Request bodies").

aiohttp waits for a body as long as the client keeps the connection open: a create that
announced 30 MB and sent 80 bytes, or a body cut short, held its handler and its
connection with no answer. :func:`watch` gives every body ``body_read_timeout_s``
seconds of silence at most: when its handler waits for bytes and none arrived for that
long, the read raises :class:`BodyTimeout` (a 408) and the connection is closed after the
answer (:func:`close_if_unread`). A body that keeps arriving, however slowly each byte
comes, and a handler busy elsewhere (its storage, while the socket's buffer is full) are
not silence.

The watch is a timer per request with a body, checked four times per period (so it
fires between 1 and 1.25 times ``body_read_timeout_s`` after the last byte).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import StreamReader, web

from contracts.errors import CutoverError

__all__ = ["BodyTimeout", "close_if_unread", "too_large", "watch"]

_CHECKS_PER_PERIOD = 4


class BodyTimeout(CutoverError):
    """The request body stopped arriving before its end (408)."""

    status = 408
    title = "Request timeout"


def too_large(limit: int) -> str:
    """The detail of a 413 for a body over ``max_body_bytes`` (``limit`` bytes)."""
    return (
        f"the request body is larger than max_body_bytes ({limit} bytes); send a large "
        "file input through the Files API (POST /v1/files, or the client's "
        "files.create) and pass its urls.get instead"
    )


def watch(request: web.Request, idle_s: float) -> Callable[[], None]:
    """Start the deadline of ``request``'s body; returns the function that stops it.

    A request without a body (or whose body has all arrived) gets no timer.
    """
    content = request.content
    if content.is_eof():
        return _nothing
    loop = asyncio.get_running_loop()
    step = idle_s / _CHECKS_PER_PERIOD
    seen = content.total_bytes
    last = time.monotonic()
    handle: asyncio.TimerHandle | None = None

    def check() -> None:
        nonlocal seen, last, handle
        if content.is_eof() or content.exception() is not None:
            return
        now = time.monotonic()
        if content.total_bytes != seen:
            seen, last = content.total_bytes, now
        elif now - last >= idle_s and _waiting(content):
            content.set_exception(BodyTimeout(
                f"the request body stopped arriving: no byte for {idle_s:g} s "
                f"(body_read_timeout_s) after {seen} bytes"
            ))
            return
        handle = loop.call_later(step, check)

    handle = loop.call_later(step, check)

    def stop() -> None:
        if handle is not None:
            handle.cancel()

    return stop


async def close_if_unread(request: web.Request, response: web.StreamResponse) -> None:
    """Send an error answered before the body was all read (a 408, a 413 found from
    ``Content-Length``, a 400) with ``Connection: close``, then close the connection:
    aiohttp would otherwise go on reading (or waiting for) the rest for up to 10 s."""
    if response.status < 400 or request.content.is_eof():
        return
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    protocol = request.protocol
    if protocol is not None:
        protocol.force_close()  # the transport sends what it holds, then closes


def _waiting(content: StreamReader) -> bool:
    """Whether the handler waits for bytes (none buffered): aiohttp's reader keeps its
    waiter private; without one the handler is busy elsewhere, not starved."""
    return getattr(content, "_waiter", None) is not None


def _nothing() -> None:
    return None
