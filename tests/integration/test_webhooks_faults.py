"""Outbound webhooks against misbehaving receivers (docs/replicate-api.md §6.1, §6.3).

Real aiohttp receivers on 127.0.0.1; retries are made due by moving ``next_attempt_at``
in the store, never by sleeping through the backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.job import JobState
from gateway.http import keys
from gateway.store.schema import outbox
from tests.support.outbox import delivery_loop, make_due, observe, outbox_rows, start_job
from tests.support.receiver import Receiver, Reply, validate_with_replicate


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


async def finish(gateway: Any, job_id: str, output: Any = "done") -> None:
    await observe(gateway, job_id, JobState.COMPLETED, output=output)


async def test_receiver_down_for_a_while_then_back_gets_every_event(make_gateway: Any) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [60] * 6})
    async with Receiver() as first:  # learn a port, then take the receiver down
        port = first.port
    url = f"http://127.0.0.1:{port}/hook"
    jobs = [await start_job(gateway, url, ["completed"]) for _ in range(3)]
    for job_id in jobs:
        await finish(gateway, job_id, output=f"out-{job_id}")
    for _ in range(2):  # down: connection refused, twice
        await gateway.settle()
        await make_due(gateway.store.engine)
    rows = await outbox_rows(gateway.store.engine)
    assert {(r.status, r.attempts) for r in rows} == {("pending", 2)}
    assert all("connection failed" in r.last_error for r in rows)

    async with Receiver(port=port, default_status=503) as back:  # up, but failing
        await gateway.settle()
        assert len(back.received) == 3
        back.default_status = 200  # healthy again
        await make_due(gateway.store.engine)
        await gateway.settle()
        assert len(back.received) == 6
        delivered = back.received[3:]
    assert {r.payload["output"] for r in delivered} == {f"out-{j}" for j in jobs}
    rows = await outbox_rows(gateway.store.engine)
    assert {(r.status, r.attempts, r.last_status_code) for r in rows} == {("delivered", 4, 200)}
    assert {r.webhook_id for r in delivered} == {r.msg_id for r in rows}


async def test_410_disables_the_endpoint_and_nothing_more_is_sent(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    gone, other = receiver.url("/gone"), receiver.url("/other")
    first = await start_job(gateway, gone, ["completed"])
    second = await start_job(gateway, gone, ["start", "completed"])
    bystander = await start_job(gateway, other, ["completed"])
    await observe(gateway, second, JobState.RUNNING)  # a start event waits for /gone...
    async with gateway.store.engine.begin() as conn:  # ...not due yet
        await conn.execute(
            outbox.update().values(next_attempt_at=datetime.now(UTC) + timedelta(hours=1))
        )
    receiver.reply(410)
    await finish(gateway, first)
    assert await delivery_loop(gateway).run_once() == 1  # only `first`

    rows = {r.job_id: r for r in await outbox_rows(gateway.store.engine)}
    assert (rows[first].status, rows[first].last_status_code) == ("dead", 410)
    assert rows[second].status == "dead" and "410 Gone" in rows[second].last_error
    endpoints = await gateway.app[keys.DEAD_LETTERS].disabled_endpoints()
    assert [e["url"] for e in endpoints] == [gone]

    await finish(gateway, second)  # a later event for the disabled URL
    await finish(gateway, bystander)
    await gateway.settle()
    assert [r.path for r in receiver.received] == ["/gone", "/other"]
    later = (await outbox_rows(gateway.store.engine, second))[-1]
    assert (later.event, later.status, later.attempts) == ("completed", "dead", 0)
    assert "not sent" in later.last_error


async def test_301_is_not_followed(make_gateway: Any, receiver: Receiver) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [60]})
    async with Receiver() as target:
        moved = Reply(301, headers={"Location": target.url("/moved")})
        receiver.reply(moved, moved)
        job_id = await start_job(gateway, receiver.url(), ["completed"])
        await finish(gateway, job_id)
        await gateway.settle()
        (row,) = await outbox_rows(gateway.store.engine, job_id)
        assert (row.status, row.last_status_code) == ("pending", 301)
        assert "redirects are not followed" in row.last_error
        await make_due(gateway.store.engine)
        await gateway.settle()
        assert target.received == []
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_status_code) == ("dead", 2, 301)
    assert len(receiver.received) == 2


async def test_slow_receiver_times_out_and_is_retried(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"timeout_s": 0.3, "retry_delays_s": [60]})
    held = asyncio.Event()
    receiver.reply(Reply(gate=held))  # the first request never gets an answer
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await finish(gateway, job_id)
    await gateway.settle()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, None)
    assert row.last_error == "no response within 0.3 s"
    assert row.next_attempt_at - row.last_attempt_at >= timedelta(seconds=50)
    await make_due(gateway.store.engine)
    await gateway.settle()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 2, 200)
    assert len({r.webhook_id for r in receiver.received}) == 1 and len(receiver.received) == 2


async def test_large_payload_rejected_with_413_is_retried_then_dead_lettered(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [30, 60]})
    receiver.default_status = 413
    job_id = await start_job(gateway, receiver.url(), ["completed"], image="x" * 300_000)
    await finish(gateway, job_id)
    for _ in range(3):
        await gateway.settle()
        await make_due(gateway.store.engine)
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_status_code) == ("dead", 3, 413)
    assert row.last_error == "HTTP 413; gave up after 3 attempts"
    assert len(receiver.received) == 3
    assert all(len(r.body) > 300_000 for r in receiver.received)
    assert len({r.webhook_id for r in receiver.received}) == 1
    dead = await gateway.app[keys.DEAD_LETTERS].list_dead()
    assert [d.id for d in dead] == [row.id]


async def test_retry_after_is_honoured(make_gateway: Any, receiver: Receiver) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [1]})
    receiver.reply(Reply(503, headers={"Retry-After": "120"}))
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await finish(gateway, job_id)
    await gateway.settle()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert row.status == "pending"
    assert row.next_attempt_at - row.last_attempt_at >= timedelta(seconds=119)


async def test_non_terminal_events_get_one_attempt_only(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ["start", "completed"])
    receiver.reply(500)
    await observe(gateway, job_id, JobState.RUNNING)
    await gateway.settle()
    await make_due(gateway.store.engine)
    await gateway.settle()
    start = (await outbox_rows(gateway.store.engine, job_id))[0]
    assert (start.event, start.status, start.attempts, start.last_status_code) == (
        "start", "dropped", 1, 500,
    )  # fmt: skip
    await finish(gateway, job_id)
    await gateway.settle()
    assert [r.payload["status"] for r in receiver.received] == ["processing", "succeeded"]


async def test_a_receiver_error_page_is_a_failure_not_a_delivery(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": []})
    receiver.reply(Reply(404, headers={"Content-Type": "text/html"}))
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await finish(gateway, job_id)
    await gateway.settle()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_error) == (
        "dead", 1, "HTTP 404; gave up after 1 attempt",
    )  # fmt: skip
    secret = (await (await gateway.client.get(
        "/v1/webhooks/default/secret", headers=gateway.headers)).json())["key"]  # fmt: skip
    validate_with_replicate(receiver.received[0], secret)


async def test_slow_receivers_cannot_hold_every_delivery_slot(make_gateway: Any) -> None:
    gateway = await make_gateway(
        webhooks={
            "allow_hosts": ["127.0.0.1", "127.0.0.2"],
            "max_concurrency": 4,
            "max_per_host": 2,
            "timeout_s": 30,
        }
    )
    held = asyncio.Event()
    async with Receiver() as slow, Receiver(host="127.0.0.2") as fast:
        slow.decide = lambda received: Reply(gate=held)  # never answers until released
        slow_jobs = [await start_job(gateway, slow.url(f"/s{i}"), ["completed"]) for i in range(6)]
        fast_job = await start_job(gateway, fast.url(), ["completed"])
        for job_id in [*slow_jobs, fast_job]:
            await finish(gateway, job_id)
        loop = delivery_loop(gateway)
        task = asyncio.create_task(loop.run())
        try:
            (got,) = await fast.wait_for(1)
            assert got.payload["id"] == fast_job
            await slow.wait_for(2)  # max_per_host attempts held...
            assert await loop.claim(4) == ([], 0)  # ...and the other four passed over
            assert len(slow.received) == 2
        finally:
            held.set()
            loop.stop()
            await asyncio.wait_for(task, 30)
