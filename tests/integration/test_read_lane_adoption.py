"""A GET of an id the gateway does not know waits on the legacy provider's lookup
(gateway/legacy/adoption.py) outside the read lane (``[gateway] read_concurrency``,
gateway/http/readlane.py): it gives its slot back before the upstream call, so polls of
known predictions are answered while the legacy provider has not answered yet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from tests.support.gateway import VERSION, GatewayHarness
from tests.support.upstreams.replicate import REPLICATE_TOKEN
from tests.support.waiting import wait_until

UNKNOWN = "a" * 26  # a prediction id's shape, never created here
ANSWER_S = 10.0


async def test_a_known_poll_is_answered_while_a_lookup_waits_upstream(
    make_gateway: Callable[..., Any], aiohttp_server: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    answer = asyncio.Event()

    async def lookup(request: web.Request) -> web.Response:  # the legacy Replicate, slow
        asked.append(request.match_info["id"])
        await answer.wait()
        return web.json_response({"detail": "Not found."}, status=404)

    upstream = web.Application()
    upstream.router.add_get("/v1/predictions/{id}", lookup)
    server = await aiohttp_server(upstream)
    monkeypatch.setenv("IT_LEGACY_TOKEN", REPLICATE_TOKEN)
    harness: GatewayHarness = await make_gateway(
        gateway={"read_concurrency": 1, "legacy_provider": "r8"},
        providers={"r8": {"kind": "replicate", "base_url": str(server.make_url("")),
                          "token_env": "IT_LEGACY_TOKEN"}},
    )
    known = (await harness.create({"version": VERSION, "input": {"prompt": "hi"}}))["id"]
    unknown = asyncio.create_task(
        harness.client.get(f"/v1/predictions/{UNKNOWN}", headers=harness.headers))
    try:
        await wait_until(lambda: asked == [UNKNOWN], ANSWER_S, what="the upstream lookup")
        poll = await asyncio.wait_for(
            harness.client.get(f"/v1/predictions/{known}", headers=harness.headers), ANSWER_S)
        assert poll.status == 200  # not parked behind the lookup's slot
        assert (await poll.json())["id"] == known
        assert not unknown.done()  # the lookup still waits upstream
    finally:
        answer.set()
    assert (await asyncio.wait_for(unknown, ANSWER_S)).status == 404
    again = await asyncio.wait_for(
        harness.client.get(f"/v1/predictions/{known}", headers=harness.headers), ANSWER_S)
    assert again.status == 200  # the lane's one slot was given back once, not lost
