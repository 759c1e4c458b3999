"""PostgreSQL: a provider webhook's reads take the lifecycle's connections, never the ones
polling GETs share (gateway/store/engine/aio.py ``reserved``, ``Engine.lifecycle_read``).
With every shared connection held by request work (thousands of polls), the webhook's
URL check (``JobStore.callback_token``, ``Intake.authorize``) still answers and the event
is stored, and the event processor's read of the job (``JobStore.get_applied``) still
reads it, while a GET's own read waits for a shared connection."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from tests.support.gateway import GatewayHarness
from tests.support.outbox import event_rows, queued_job

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
    assert row.processed_at is None  # stored for the processor, as on PostgreSQL always
