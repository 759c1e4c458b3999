"""A job a provider reported lost holds none of its ``max_concurrency`` slots only when
"lost" means the provider is not running it (Cog's probe), not when it means only "this
process cannot see it" (an OpenAI-compatible call held by another gateway process):
docs/cog.md §2, docs/providers.md ("OpenAI-compatible"); on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.app import LOOPS
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

TOKEN_ENV = "CUTOVER_TEST_LOST_OPENAI_KEY"


def _loop(gateway: GatewayHarness, name: str) -> Any:
    return next(loop for loop in gateway.app[LOOPS] if loop.name == name)


def _running(server: FakeOpenAI) -> int:
    return sum(job.state == "running" for job in server.jobs.values())


async def _succeeded(gateway: GatewayHarness, prediction_id: str) -> None:
    """Poll (the clock moved to each next poll) until the prediction has succeeded."""

    async def done() -> bool:
        gateway.clock.advance(2.0)
        await gateway.settle()
        return (await gateway.get(prediction_id))["status"] == "succeeded"

    await wait_until(done, what=f"{prediction_id} succeeded")


async def test_a_call_held_by_another_process_keeps_its_slot(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, OPENAI_TOKEN)
    async with FakeOpenAI(token=OPENAI_TOKEN) as server:
        server.gate = asyncio.Event()  # every call is held until the test opens it
        sections = _sections(server, max_concurrency=1)
        holder, other = await make_gateway(**sections), await make_gateway(**sections)
        try:
            first = await holder.create({"version": VERSION, "input": {"prompt": "one"}})
            assert await _loop(holder, "dispatcher").run_once() == 1
            await wait_until(lambda: _running(server) == 1, what="the first call held")
            second = await holder.create({"version": VERSION, "input": {"prompt": "two"}})
            assert await _loop(holder, "dispatcher").run_once() == 0  # the one slot is taken

            # The other process polls the first job: its adapter does not hold the call.
            other.clock.advance(5.0)
            assert await _loop(other, "poller").run_once() == 1
            job = await other.store.get(first["id"])
            assert job.lost_at is not None and not job.state.terminal  # waits lost_grace_s

            # The holder is still running the call: the second must still wait.
            assert await _loop(holder, "dispatcher").run_once() == 0
            assert await _loop(other, "dispatcher").run_once() == 0
            assert _running(server) == 1
            assert (await holder.get(second["id"]))["status"] == "starting"

            server.gate.set()  # the first call ends: now the second goes
            await _succeeded(holder, first["id"])
            await _succeeded(holder, second["id"])
        finally:
            server.gate.set()


async def test_a_call_longer_than_the_grace_is_not_failed_by_another_process_while_held(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other process finds the call lost at each poll, and the holder finds it in
    flight: the holder's poll says it is not lost, so the other never reaches
    ``lost_grace_s`` (the call timeout) while the holder lives. A streamed call has no
    overall deadline (the timeout is per read), so a long generation outlived the grace
    and the other process failed it, 'held by a gateway process that no longer holds
    it', while the holder streamed on; its answer was then dropped."""
    monkeypatch.setenv(TOKEN_ENV, OPENAI_TOKEN)
    async with FakeOpenAI(token=OPENAI_TOKEN) as server:
        server.gate = asyncio.Event()  # the call runs until the test opens it
        sections = _sections(server, request_timeout_s=10.0)
        holder, other = await make_gateway(**sections), await make_gateway(**sections)
        try:
            made = await holder.create({"version": VERSION, "input": {"prompt": "long one"}})
            assert await _loop(holder, "dispatcher").run_once() == 1
            await wait_until(lambda: _running(server) == 1, what="the call held")
            for _ in range(3):  # 3 x 7 s: twice the grace, polled by each in turn
                for gateway, step_s in ((other, 5.0), (holder, 2.0)):
                    for both in (holder, other):
                        both.clock.advance(step_s)
                    polled = await _loop(gateway, "poller").run_once()
                    assert (await other.get(made["id"]))["status"] == "processing"
                    assert polled == 1
            server.gate.set()
            await _succeeded(holder, made["id"])
        finally:
            server.gate.set()


def _sections(server: FakeOpenAI, **provider: Any) -> dict[str, Any]:
    """One OpenAI-compatible provider ``oa`` (polled every second) and a route to it."""
    return {
        "providers": {"oa": {
            "kind": "openai", "base_url": f"{server.url}/v1", "token_env": TOKEN_ENV,
            "fetch_interval_s": 1.0, "fetch_max_interval_s": 1.0, **provider,
        }},
        "routes": [{"model": "acme/echo", "version": VERSION, "provider": "oa",
                    "target": "echo-1"}],
    }
