"""The idle loops' next-work times (gateway/store/due.py): on SQLite the lock-free reader
answers with fixed SQL; its answers are the engine's, whatever the rows hold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.notify import LoopName
from gateway.store.due import Due
from gateway.store.engine import db
from gateway.store.schema import jobs
from tests.support.gateway import VERSION
from tests.support.outbox import events_loop, start_job

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


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


async def test_a_job_past_its_deadline_that_no_submit_reached_is_not_due_for_dispatch(
    make_gateway: Any,
) -> None:
    """The reaper ends it (canceled before it started); counted as due, it kept an idle
    dispatcher going round every loop_interval_s, each round claiming nothing.

    The times asked about are the deadline's, not the clock's: the deadline (10 min) and
    the busy submit's backoff (up to an hour) outlast the test, so the job stays queued
    and deferred whatever the machine's load. (With a 5 s deadline and the harness's
    10-50 ms backoff, a settle pass slower than the backoff found the job due again, and
    settle went round until the reaper canceled it at the deadline.)"""
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 100}},
        gateway={"dispatch_backoff_base_s": 3600.0, "dispatch_backoff_max_s": 3600.0},
    )
    engine = gateway.store.engine
    fast, slow = Due(engine), Due(engine, fast=False)
    gateway.fake.busy_times = 10**6  # deferred: a queued job with its next attempt set
    made = await gateway.create({"version": VERSION, "input": {"prompt": "x"}},
                                **{"Cancel-After": "10m"})
    await gateway.settle()
    job = await gateway.store.get(made["id"])
    assert gateway.fake.busy_times < 10**6, "a submit was tried, and refused busy"
    assert job.state == JobState.QUEUED and job.raw_status == "busy"
    assert job.deadline is not None and job.submitted_at is None
    before = job.deadline - timedelta(seconds=1)
    assert await fast.dispatch(before) == await slow.dispatch(before) is not None
    after = job.deadline + timedelta(seconds=1)
    assert await fast.dispatch(after) is None
    assert await slow.dispatch(after) is None


async def test_a_requested_cancel_no_round_has_sent_is_due_at_once(
    make_gateway: Any, backend: str, database_url: str,
) -> None:
    """A cancel request on a submitted job is the reaper's work now, not at its grace: the
    reaper's claim passes over a row another transaction holds locked (a poll's claim, on
    PostgreSQL ``SKIP LOCKED``), and the round that found nothing left the reaper asleep
    for ``loop_max_idle_s`` (10 s) with the cancel unsent (seen in the adoption suite's
    cancel through cutover). Once sent, it is not due again before its resend time."""
    gateway = await make_gateway(gateway={"cancel_grace_s": 30.0, "cancel_resend_s": 10.0})
    reaper = next(loop for loop in gateway.app[LOOPS] if loop.name is LoopName.REAPER)
    job_id = await start_job(gateway, "http://127.0.0.1:9/hook")
    job = await gateway.store.get(job_id)
    assert job.submitted_at is not None and not job.state.terminal
    interval_s = 0.05  # the harness's loop_interval_s
    assert await reaper.idle_s() > interval_s  # nothing to cancel yet
    response = await gateway.client.post(f"/v1/predictions/{job_id}/cancel",
                                          headers=gateway.headers)
    assert response.status == 200
    if backend == "postgres":  # a poll's claim holds the row as the woken reaper looks
        engine = db.create_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.select(jobs.c.id).where(jobs.c.id == job_id)
                                   .with_for_update())
                assert await reaper.run_once() == 0  # passed over, unsent
                assert gateway.fake.cancel_calls == []
                assert await reaper.idle_s() == interval_s
        finally:
            await engine.dispose()
    assert await reaper.idle_s() == interval_s
    assert await reaper.run_once() == 1
    assert gateway.fake.cancel_calls == [job.provider_job_id]
    assert await reaper.idle_s() > interval_s  # sent: due at its resend, 10 s on


async def test_a_deadline_cancel_once_sent_is_not_due_again_before_its_resend(
    make_gateway: Any,
) -> None:
    """Past its deadline a job's cancel is due; once sent, the job waits for the
    provider's answer until the resend time or the grace. The reaper's next-work time
    was the deadline itself, passed, so an idle reaper went round every
    ``loop_interval_s`` (an empty round each time) until the grace ended the job."""
    gateway = await make_gateway(gateway={"cancel_grace_s": 30.0, "cancel_resend_s": 10.0})
    reaper = next(loop for loop in gateway.app[LOOPS] if loop.name is LoopName.REAPER)
    made = await gateway.create({"version": VERSION, "input": {"prompt": "x"}},
                                **{"Cancel-After": "5s"})
    await gateway.settle()
    job = await gateway.store.get(made["id"])
    assert job.submitted_at is not None and job.deadline is not None
    interval_s = 0.05  # the harness's loop_interval_s
    gateway.clock.advance(6.0)  # past the deadline: its cancel is due
    assert await reaper.idle_s() == interval_s
    assert await reaper.run_once() == 1
    assert gateway.fake.cancel_calls == [job.provider_job_id]
    assert interval_s < await reaper.idle_s() <= 10.0  # the resend, 10 s on
