"""Outputs and provider webhooks that try to hurt the gateway (found by a break-it pass).

* URLs in an output are the model's text unless their host is one of the provider's
  declared ``file_hosts``: the gateway never fetches anything else (no SSRF through
  outputs), and follows no redirect when it does fetch.
* A download has a total deadline; a finalize that cannot store its result fails the
  prediction instead of freezing the provider's queue.
* Provider webhooks may be as large as an output file, and are only read after the URL
  checked out.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.job import JobState
from gateway.http import keys
from tests.support.gateway import VERSION, GatewayHarness


class FileServer:
    """A real HTTP server on 127.0.0.1 that counts the requests it gets."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        app = web.Application()
        app.router.add_get("/secret", self._secret)
        app.router.add_get("/file.txt", self._file)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/drip", self._drip)
        self.server = TestServer(app, host="127.0.0.1")

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def _secret(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text="TOP SECRET")

    async def _file(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(body=b"owned bytes", content_type="text/plain")

    async def _redirect(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        raise web.HTTPFound(self.url("/secret"))

    async def _drip(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x")
            # the drip is the behaviour under test: a byte every 0.2 s, so the download
            # outlasts its deadline while bytes keep coming (no read ever times out)
            await asyncio.sleep(0.2)
        return response


@pytest.fixture
async def files() -> AsyncIterator[FileServer]:
    server = FileServer()
    await server.server.start_server()
    yield server
    await server.server.close()


async def finish_with(gateway: GatewayHarness, output: object, **fields: object) -> dict:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    status = await gateway.deliver(prediction["id"], JobState.COMPLETED, output=output, **fields)
    assert status == 200
    await gateway.settle()
    return await gateway.get(prediction["id"])


async def test_a_url_in_the_output_is_text_and_never_fetched(gateway, files: FileServer):
    secret = files.url("/secret")
    done = await finish_with(gateway, {"link": secret, "note": "https://example.com is mine"})
    assert done["status"] == "succeeded"
    assert done["output"] == {"link": secret, "note": "https://example.com is mine"}
    assert files.hits == []


async def test_text_that_only_looks_like_a_data_uri_stays_text(gateway: GatewayHarness):
    done = await finish_with(gateway, ["data:foo", "data: is a word"])
    assert done["status"] == "succeeded" and done["output"] == ["data:foo", "data: is a word"]


async def test_a_file_on_a_declared_file_host_is_copied(make_gateway, files: FileServer):
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}})
    done = await finish_with(gateway, files.url("/file.txt"))
    assert done["status"] == "succeeded"
    assert done["output"].startswith("https://gateway.test/assets/")
    assert done["output"].endswith("/file.txt")
    response = await gateway.client.get(done["output"].removeprefix("https://gateway.test"))
    assert await response.read() == b"owned bytes"


async def test_a_redirect_from_a_file_host_is_not_followed(make_gateway, files: FileServer):
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}})
    done = await finish_with(gateway, files.url("/redirect"))
    assert done["status"] == "failed" and "HTTP 302" in done["error"]
    assert files.hits == ["/redirect"]


async def test_a_download_that_drips_fails_at_its_deadline(make_gateway, files: FileServer):
    gateway = await make_gateway(
        gateway={"output_download_timeout_s": 0.5},
        providers={"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}},
    )
    done = await finish_with(gateway, files.url("/drip"))
    assert done["status"] == "failed" and "did not download within" in done["error"]


async def test_a_crash_while_storing_fails_the_job_and_frees_the_provider(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
):
    async def broken_put(key: str, data: bytes, content_type: str = "") -> None:
        raise OSError(36, "File name too long")

    monkeypatch.setattr(gateway.app[keys.STORAGE], "put", broken_put)
    png = "data:image/png;base64," + base64.b64encode(b"png").decode()
    done = await finish_with(gateway, png)
    assert done["status"] == "failed" and "OSError" in done["error"]
    assert done["output"] is None
    assert await gateway.store.count_in_flight("fake") == 0


async def test_nul_characters_from_the_provider_are_stored_on_every_backend(gateway):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await gateway.deliver(prediction["id"], JobState.RUNNING, logs="a\x00b\n")
    await gateway.settle()
    await gateway.deliver(prediction["id"], JobState.FAILED, error="bad \x00 input")
    done = await gateway.wait_for(prediction["id"], "failed")
    assert done["error"] == "bad \ufffd input" and done["logs"] == "a\ufffdb\n"


async def test_a_refused_output_is_not_shown_on_the_failed_prediction(make_gateway):
    gateway = await make_gateway(gateway={"max_output_bytes": 4})
    big = "data:text/plain;base64," + base64.b64encode(b"too large").decode()
    done = await finish_with(gateway, [big])
    assert done["status"] == "failed" and done["output"] is None


async def test_provider_webhooks_may_exceed_the_api_body_limit(make_gateway):
    gateway = await make_gateway(gateway={"max_body_bytes": 1024})
    text = "data:text/plain;base64," + base64.b64encode(b"y" * 5000).decode()
    done = await finish_with(gateway, text)
    assert done["status"] == "succeeded"


async def test_a_webhook_to_an_unknown_url_is_refused_before_its_body_is_read(
    gateway: GatewayHarness,
):
    headers = {"Content-Length": str(50 * 1024 * 1024)}
    response = await gateway.client.post(
        "/provider-webhooks/fake/aaaaaaaaaaaaaaaaaaaaaaaaaa/nope", data=b"{}", headers=headers
    )
    assert response.status == 401


async def test_assets_are_served_inert(gateway: GatewayHarness):
    html = "data:text/html;base64," + base64.b64encode(b"<script>alert(1)</script>").decode()
    done = await finish_with(gateway, html)
    response = await gateway.client.get(done["output"].removeprefix("https://gateway.test"))
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response.headers["Content-Security-Policy"]


async def test_a_number_too_large_for_a_double_is_refused(gateway: GatewayHarness):
    response = await gateway.client.post(
        "/v1/predictions",
        data=b'{"version": "acme/echo", "input": {"n": 1e999}}',
        headers={**gateway.headers, "Content-Type": "application/json"},
    )
    assert response.status == 422
    assert "too large" in (await response.json())["detail"]
