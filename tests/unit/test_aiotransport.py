"""httpx requests through aiohttp's client (adapters/aiotransport.py), against a real
aiohttp server on 127.0.0.1: what the request carries, what httpx reads back, and the
httpx exceptions each failure becomes (what the Cog adapter translates)."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from adapters.aiotransport import AiohttpTransport, json_body, send
from adapters.tls import client_context


@pytest.fixture
async def server() -> AsyncIterator[str]:
    never = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({
            "method": request.method, "path": request.path_qs, "body": body.decode(),
            "prefer": request.headers.get("Prefer"), "type": request.headers.get("Content-Type"),
        }, status=202, headers={"X-Seen": "yes"})

    async def gzipped(_request: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(b"hello " * 100),
                            headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})

    async def stalls(_request: web.Request) -> web.Response:
        await never.wait()
        raise AssertionError("unreachable")

    async def redirects(_request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/gzip", gzipped)
    app.router.add_get("/stall", stalls)
    app.router.add_get("/redirect", redirects)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    never.set()
    await runner.cleanup()


def _client(base_url: str, timeout_s: float = 10.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=timeout_s,
                             transport=AiohttpTransport(ssl_context=client_context()))


async def test_a_request_goes_as_httpx_built_it(server: str) -> None:
    async with _client(server) as client:
        for _ in range(3):  # the pooled connection is reused
            answer = await client.put("/echo?x=1", json={"id": "p1"},
                                      headers={"Prefer": "respond-async"})
            assert answer.status_code == 202
            assert answer.headers["x-seen"] == "yes"
            assert answer.json() == {"method": "PUT", "path": "/echo?x=1",
                                     "body": '{"id":"p1"}', "prefer": "respond-async",
                                     "type": "application/json"}


async def test_an_encoded_answer_is_decoded_by_httpx(server: str) -> None:
    async with _client(server) as client:
        assert (await client.get("/gzip")).text == "hello " * 100


async def test_redirects_are_not_followed(server: str) -> None:
    async with _client(server) as client:
        answer = await client.get("/redirect")
    assert answer.status_code == 302
    assert answer.headers["location"] == "/elsewhere"


async def test_no_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with _client(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/")


async def test_an_answer_slower_than_the_read_timeout_is_a_read_timeout(server: str) -> None:
    async with _client(server, timeout_s=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/stall")


_JSON = [("Prefer", "respond-async"), ("Content-Type", "application/json")]


async def _sent(transport: httpx.AsyncBaseTransport, url: str, timeout_s: float = 10.0,
                method: str = "PUT") -> httpx.Response:
    return await send(transport, method, url, content=json_body({"id": "p1", "ü": 1}),
                      headers=_JSON, limits=httpx.Timeout(timeout_s))


@pytest.mark.parametrize("through", ["aiohttp", "httpx"])
async def test_send_sends_what_the_client_would(server: str, through: str) -> None:
    transport: httpx.AsyncBaseTransport = (
        AiohttpTransport(ssl_context=client_context()) if through == "aiohttp"
        else httpx.AsyncHTTPTransport())
    try:
        for _ in range(2):
            answer = await _sent(transport, server + "/echo?x=1")
            assert answer.status_code == 202
            assert answer.headers["x-seen"] == "yes"
            assert answer.json() == {"method": "PUT", "path": "/echo?x=1",
                                     "body": '{"id":"p1","ü":1}', "prefer": "respond-async",
                                     "type": "application/json"}
        async with httpx.AsyncClient() as client:  # the body as httpx's json= encodes it
            built = client.build_request("PUT", server, json={"id": "p1", "ü": 1})
        assert json_body({"id": "p1", "ü": 1}) == built.content
    finally:
        await transport.aclose()


async def test_send_decodes_an_encoded_answer(server: str) -> None:
    transport = AiohttpTransport(ssl_context=client_context())
    try:
        assert (await _sent(transport, server + "/gzip", method="GET")).text == "hello " * 100
    finally:
        await transport.aclose()


async def test_send_raises_what_httpx_raises(server: str) -> None:
    transport = AiohttpTransport(ssl_context=client_context())
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        with pytest.raises(httpx.ConnectError):
            await _sent(transport, f"http://127.0.0.1:{port}/")
        with pytest.raises(httpx.ReadTimeout):
            await _sent(transport, server + "/stall", timeout_s=0.2, method="GET")
    finally:
        await transport.aclose()
