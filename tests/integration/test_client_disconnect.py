"""A client that goes away while its body is read is a client disconnect, not a store outage.

aiohttp fails the body read with ``ConnectionResetError`` when the connection is lost;
that is a ``ConnectionError``, which the store's error test counts as "the database cannot
be reached", so the problem middleware used to log ``store_unreachable`` and answer 503
(seen in the two-process PostgreSQL test logs). Now it logs ``client_disconnected`` at
info and blames nobody (the access line says 499, nginx's "client closed request").

The app runs as ``cutover serve`` runs it (an AppRunner without handler cancellation):
aiohttp's test server cancels the handler instead, which production never does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Settings
from tests.support.gateway import TOKEN
from tests.support.waiting import wait_until


async def test_a_client_gone_mid_body_is_not_reported_as_the_store_unreachable(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    runner = web.AppRunner(create_app(make_settings(), run_loops=False), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        _, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /v1/predictions HTTP/1.1\r\nHost: gateway.test\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            + b'{"version": "'
        )
        await writer.drain()
        await wait_until(lambda: runner.server and runner.server.connections,
                         what="the gateway has the connection")
        writer.close()  # the rest of the body never comes
        await writer.wait_closed()

        def access_lines() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.getMessage() == "request"]

        await wait_until(access_lines, what="the request's access line")
    finally:
        await runner.cleanup()
    messages = [r.getMessage() for r in caplog.records]
    assert "store_unreachable" not in messages and "store_busy" not in messages
    assert "unhandled_error" not in messages
    gone = [r for r in caplog.records if r.getMessage() == "client_disconnected"]
    assert [r.levelno for r in gone] == [logging.INFO]
    assert [getattr(r, "status", None) for r in access_lines()] == [499]
