"""A held ``Prefer: wait`` answer is woken when another gateway process sharing the store
finishes its prediction, and the watcher asks the store only about waits that last
(gateway/watch.py, docs/lifecycle.md "Held answers across processes"); on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.http import keys
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # two processes sharing one store


def _watcher(gateway: GatewayHarness) -> Any:
    return next(loop for loop in gateway.app[LOOPS] if loop.name == "watcher")


async def test_a_wait_held_here_wakes_when_another_process_finishes_the_prediction(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder, finisher = await make_gateway(), await make_gateway()
    asked: list[list[str]] = []
    terminal_among = holder.store.terminal_among

    async def counted(job_ids: list[str]) -> list[str]:
        asked.append(list(job_ids))
        return await terminal_among(job_ids)

    monkeypatch.setattr(holder.store, "terminal_among", counted)
    notifier = holder.app[keys.NOTIFIER]
    held = asyncio.create_task(holder.client.post(
        "/v1/predictions", json={"version": VERSION, "input": {"prompt": "x"}},
        headers={**holder.headers, "Prefer": "wait=30"},
    ))
    await wait_until(lambda: notifier.waited_jobs(), what="the create held")
    [job_id] = notifier.waited_jobs()

    await finisher.settle()  # the other process submits it and applies its webhook
    assert await finisher.deliver(job_id, JobState.COMPLETED, output="done") == 200
    await finisher.wait_for(job_id, "succeeded")

    watcher = _watcher(holder)
    await watcher.run_once()  # a wait just begun: not asked about yet
    assert asked == [] and not held.done()

    holder.clock.advance(0.25)  # waited on for one interval: asked about, and woken
    await watcher.run_once()
    assert asked == [[job_id]]
    response = await asyncio.wait_for(held, 10)
    assert response.status == 201
    assert (await response.json())["status"] == "succeeded"


async def test_a_wait_its_own_process_ends_costs_the_watcher_no_query(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[list[str]] = []

    async def counted(job_ids: list[str]) -> list[str]:
        asked.append(list(job_ids))
        return []

    monkeypatch.setattr(gateway.store, "terminal_among", counted)
    notifier = gateway.app[keys.NOTIFIER]
    held = asyncio.create_task(gateway.client.post(
        "/v1/predictions", json={"version": VERSION, "input": {"prompt": "x"}},
        headers={**gateway.headers, "Prefer": "wait=30"},
    ))
    await wait_until(lambda: notifier.waited_jobs(), what="the create held")
    [job_id] = notifier.waited_jobs()
    watcher = _watcher(gateway)
    await gateway.settle()
    assert await gateway.deliver(job_id, JobState.RUNNING) == 200
    await gateway.settle()
    await watcher.run_once()
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    await gateway.settle()
    response = await asyncio.wait_for(held, 10)
    assert (await response.json())["status"] == "succeeded"
    await watcher.run_once()
    assert asked == [] and notifier.waited_jobs() == []
