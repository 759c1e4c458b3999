"""A webhook receiver for tests: a real aiohttp app on 127.0.0.1, port 0.

:class:`Receiver` records every POST (headers lower-cased, raw body, path) and answers
as the test says: a queue of scripted responses first (status, headers, a delay or a
gate to wait on), then ``decide(request)`` if set, else ``default_status``.
:func:`validate_with_replicate` checks a delivery the way the ``replicate`` client does.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from replicate.webhook import Webhooks, WebhookSigningSecret

__all__ = ["Received", "Receiver", "Reply", "validate_with_replicate"]


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Reply:
    """A scripted answer: ``status`` and ``headers``, after ``delay_s`` or ``gate``."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    gate: asyncio.Event | None = None


class Receiver:
    """Records webhook deliveries; see the module docstring."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        default_status: int = 200,
        max_body_bytes: int = 64 * 1024**2,
    ) -> None:
        assert host.startswith("127."), "test receivers stay on 127.0.0.0/8"
        self.host = host
        self.default_status = default_status
        self.received: list[Received] = []
        self.accepted: list[Received] = []  # the ones answered with a 2xx
        self.replies: deque[Reply] = deque()
        self.decide: Callable[[Received], Reply] | None = None
        self.arrived = asyncio.Event()
        self._gates: list[asyncio.Event] = []
        self._app = web.Application(client_max_size=max_body_bytes)
        self._app.router.add_route("*", "/{tail:.*}", self._handle)
        self._server = TestServer(self._app, host=host, port=port)

    async def __aenter__(self) -> Receiver:
        await self._server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for gate in self._gates:  # let held requests finish, so the server closes at once
            gate.set()
        await self._server.close()

    @property
    def port(self) -> int:
        assert self._server.port is not None
        return self._server.port

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def reply(self, *replies: Reply | int) -> None:
        """Queue answers for the next requests (an int is a bare status)."""
        for item in replies:
            self.replies.append(Reply(item) if isinstance(item, int) else item)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = Received(
            path=request.path,
            query=request.query_string,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.read(),
        )
        self.received.append(received)
        self.arrived.set()
        if self.replies:
            reply = self.replies.popleft()
        elif self.decide is not None:
            reply = self.decide(received)
        else:
            reply = Reply(self.default_status)
        if reply.gate is not None:
            self._gates.append(reply.gate)
            await reply.gate.wait()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if 200 <= reply.status < 300:
            self.accepted.append(received)
        return web.Response(status=reply.status, headers=reply.headers)

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        """Wait until at least ``count`` requests arrived (or fail after ``timeout_s``)."""

        async def enough() -> None:
            while len(self.received) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), timeout_s)
        return self.received


def validate_with_replicate(received: Received, secret: str) -> None:
    """Raise unless the ``replicate`` client's own validator accepts ``received``."""
    Webhooks.validate(
        headers=received.headers,
        body=received.body.decode("utf-8"),
        secret=WebhookSigningSecret(key=secret),
        tolerance=300,
    )
