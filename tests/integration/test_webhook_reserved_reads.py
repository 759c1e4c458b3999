"""PostgreSQL: a provider webhook's reads take the lifecycle's connections, never the ones
polling GETs share (gateway/store/engine/aio.py ``reserved``, ``Engine.lifecycle_read``).
With every shared connection held by request work (thousands of polls), the webhook's
URL check (``JobStore.callback_token``, ``Intake.authorize``) still answers and the event
is stored, and the event processor's read of the job (``JobStore.get_applied``) still
reads it, while a GET's own read waits for a shared connection; RunPod's unsigned poke
(``JobStore.check_now``) is answered too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.store.schema import jobs
from tests.contract.drivers import pump
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import event_rows, queued_job
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend

ANSWER_S = 10.0  # far below the pool's 30 s timeout: a webhook waiting for one fails


async def hold_shared(gateway: GatewayHarness, release: asyncio.Event) -> list[asyncio.Task[None]]:
    """Request work holding every shared connection of the store's engine until
    ``release`` is set (the tasks, once all hold one)."""
    engine = gateway.store.engine
    assert engine.shared is not None
    held = 0

    async def hold() -> None:
        nonlocal held
        async with engine.read() as conn:
            await conn.execute(sa.text("SELECT 1"))
            held += 1
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(engine.shared)]
    deadline = asyncio.get_running_loop().time() + ANSWER_S
    while held < engine.shared:
        assert not any(task.done() for task in holders)
        assert asyncio.get_running_loop().time() < deadline, "the holders took no connection"
        await asyncio.sleep(0.01)
    return holders


async def test_a_webhook_is_answered_while_polls_hold_every_shared_connection(
    gateway: GatewayHarness, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("PostgreSQL's pool: SQLite has one connection and reads beside it")
    job_id = await queued_job(gateway)
    await queued_job(gateway)  # a later dispatch round: the first job's token is read
    assert gateway.store.claimed_token(job_id) is None
    provider, token = await gateway.store.callback_token(job_id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(job_id, JobState.RUNNING, logs="step 1\n")
    release = asyncio.Event()
    holders = await hold_shared(gateway, release)
    try:
        with pytest.raises(TimeoutError):  # the read side is saturated: a GET's read waits
            await asyncio.wait_for(gateway.store.get(job_id), timeout=0.3)

        async def webhook() -> int:
            response = await gateway.client.post(
                f"/provider-webhooks/{provider}/{job_id}/{token}", data=body,
                headers=gateway.fake.sign(body))
            return response.status

        assert await asyncio.wait_for(webhook(), timeout=ANSWER_S) == 200
        job, applying = await asyncio.wait_for(gateway.store.get_applied(job_id), ANSWER_S)
        assert (job.id, applying) == (job_id, None)
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)
    (row,) = await event_rows(gateway, job_id)
    # applied as it was stored, on the lifecycle's own connection (gateway/store/pgapplied.py)
    assert row.processed_at is not None
    assert (await gateway.store.get(job_id)).logs == "step 1\n"


async def test_a_runpod_poke_is_answered_while_polls_hold_every_shared_connection(
    make_gateway: Callable[..., Any], backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunPod's unsigned webhook only makes its job's next poll due now
    (``JobStore.check_now``, gateway/intake.py): that write is the lifecycle's too."""
    if backend != "postgres":
        pytest.skip("PostgreSQL's pool: SQLite has one connection and reads beside it")
    monkeypatch.setenv("CUTOVER_TEST_RUNPOD_KEY", RUNPOD_TOKEN)
    async with FakeRunPod(token=RUNPOD_TOKEN) as runpod:
        gateway: GatewayHarness = await make_gateway(
            providers={"up": {"kind": "runpod", "base_url": f"{runpod.url}/v2",
                              "token_env": "CUTOVER_TEST_RUNPOD_KEY", "fetch_interval_s": 60.0}},
            routes=[{"model": "acme/echo", "version": VERSION, "provider": "up",
                     "target": "ep-echo"}],
        )
        created = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
        job_id = created["id"]

        async def submitted() -> bool:
            await pump(gateway, rounds=1)
            return (await gateway.store.get(job_id)).submitted_at is not None

        await wait_until(submitted, ANSWER_S, what="the RunPod submit")
        provider, token = await gateway.store.callback_token(job_id)  # type: ignore[misc]
        assert await next_check(gateway, job_id) > gateway.clock.now()  # a minute away
        release = asyncio.Event()
        holders = await hold_shared(gateway, release)
        try:
            async def poke() -> int:
                response = await gateway.client.post(
                    f"/provider-webhooks/{provider}/{job_id}/{token}",
                    data=b'{"id": "whatever", "status": "COMPLETED"}')
                return response.status

            assert await asyncio.wait_for(poke(), timeout=ANSWER_S) == 200
        finally:
            release.set()
            await asyncio.gather(*holders, return_exceptions=True)
        assert await next_check(gateway, job_id) <= gateway.clock.now()  # due now


async def next_check(gateway: GatewayHarness, job_id: str) -> datetime:
    async with gateway.store.engine.connect() as conn:
        query = sa.select(jobs.c.next_attempt_at).where(jobs.c.id == job_id)
        found: datetime = (await conn.execute(query)).scalar_one()
    return found
