"""The idle loops' next-work times (gateway/store/due.py): on SQLite the lock-free reader
answers with fixed SQL; its answers are the engine's, whatever the rows hold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from contracts.job import JobState
from gateway.store.due import Due
from tests.support.gateway import VERSION
from tests.support.outbox import events_loop, start_job


async def answers(due: Due, now: Any) -> list[Any]:
    return [
        await due.dispatch(now), await due.fetch(now), await due.events(now),
        await due.delivery(now),
        await due.reap(now, grace_s=30, resend_s=10, lifetime_s=3600),
    ]


async def test_the_reader_answers_as_the_engine(make_gateway: Any) -> None:
    gateway = await make_gateway()
    engine = gateway.store.engine
    fast, slow = Due(engine), Due(engine, fast=False)
    now = gateway.clock.now()
    assert await answers(fast, now) == await answers(slow, now) == [None] * 5
    done = await start_job(gateway, "http://127.0.0.1:9/hook", ["completed"])
    running = await start_job(gateway, "http://127.0.0.1:9/hook")
    await gateway.create({"version": VERSION, "input": {"prompt": "waits"}})  # not dispatched
    assert await gateway.deliver(done, JobState.COMPLETED, output="x") == 200
    while await events_loop(gateway).run_once():  # a pending outbox row
        pass
    assert await gateway.deliver(running, JobState.RUNNING) == 200  # stored, not applied
    for at in (now, now + timedelta(seconds=90), now + timedelta(days=2)):
        expected = await answers(slow, at)
        assert await answers(fast, at) == expected
        assert all(x is None or x.tzinfo is not None for x in expected)
