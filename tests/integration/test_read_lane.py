"""``[gateway] read_concurrency``: at most that many prediction GETs in their handlers at
once, the rest parked in order; other requests pass (gateway/http/readlane.py,
docs/lifecycle.md, "Reads and the lifecycle")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from pydantic import ValidationError

from gateway.config import Settings
from gateway.http.readlane import read_lane
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until


async def test_reads_past_the_bound_wait_their_turn_and_nothing_else_waits(
    aiohttp_client: Callable[..., Any],
) -> None:
    arrived: list[str] = []
    inside: list[str] = []
    release = asyncio.Event()

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        arrived.append(request.path)
        return await handler(request)

    async def held(request: web.Request) -> web.Response:
        inside.append(request.match_info["id"])
        await release.wait()
        return web.json_response({"id": request.match_info["id"]})

    async def at_once(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(middlewares=[count, read_lane(1)])
    app.router.add_get("/v1/predictions/{id}", held)
    app.router.add_get("/v1/predictions", at_once)
    app.router.add_post("/v1/predictions/{id}/cancel", at_once)
    client = await aiohttp_client(app)
    first = asyncio.create_task(client.get("/v1/predictions/a"))
    await wait_until(lambda: inside == ["a"], what="the first read in its handler")
    second = asyncio.create_task(client.get("/v1/predictions/b"))
    await wait_until(lambda: "/v1/predictions/b" in arrived, what="the second read arrived")
    for other in (client.get("/v1/predictions"), client.post("/v1/predictions/b/cancel")):
        assert (await other).status == 200  # neither waits behind the held read
    assert inside == ["a"]  # the second read is parked at the bound
    release.set()
    answers = [await first, await second]
    assert [a.status for a in answers] == [200, 200]
    assert inside == ["a", "b"]


async def test_a_gateway_with_a_read_bound_serves_every_concurrent_poll(
    make_gateway: Callable[..., Any],
) -> None:
    harness: GatewayHarness = await make_gateway(gateway={"read_concurrency": 2})
    job_id = (await harness.create({"version": VERSION, "input": {"prompt": "hi"}}))["id"]
    answers = await asyncio.gather(*(
        harness.client.get(f"/v1/predictions/{job_id}", headers=harness.headers)
        for _ in range(20)))
    assert [a.status for a in answers] == [200] * 20
    assert {(await a.json())["id"] for a in answers} == {job_id}


def test_the_read_bound_is_a_positive_count(make_settings: Callable[..., Settings]) -> None:
    assert make_settings().gateway.read_concurrency is None  # no bound unless asked
    for bad in (0, -1):
        with pytest.raises(ValidationError, match="read_concurrency"):
            make_settings(gateway={"read_concurrency": bad})
