"""A provider webhook applied in the transaction that stores it on PostgreSQL
(gateway/store/pgapplied.py): the event is stored processed and the processor's round
applies nothing; an event that must wait still waits: one behind an apply lease of its
job, and one whose job row another transaction holds because it is storing an earlier
event of the job (another gateway process): the webhook's transaction waits for that
one's commit, then finds the earlier event unprocessed and is stored for the processor,
after it (docs/lifecycle.md, "Order of a job's provider events").
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.store.records import Outcome
from tests.support.gateway import GatewayHarness
from tests.support.outbox import drain, event_rows, queued_job
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend


def postgres_only(gateway: GatewayHarness) -> None:
    if gateway.store.engine.dialect.name != "postgresql":
        pytest.skip("the PostgreSQL path (a SQLite file's: test_events_applied.py)")


async def test_a_progress_webhook_is_stored_processed_and_leaves_the_processor_nothing(
    gateway: GatewayHarness,
) -> None:
    postgres_only(gateway)
    job_id = await queued_job(gateway)
    for n, logs in enumerate(["a\n", "a\nb\n"]):
        assert await gateway.deliver(job_id, JobState.RUNNING, logs=logs) == 200
        rows = await event_rows(gateway, job_id)
        assert len(rows) == n + 1 and rows[-1].processed_at is not None
        assert rows[-1].lease_owner is None and rows[-1].leased_until is None
        assert (await gateway.store.get(job_id)).logs == logs  # before the answer
    assert await drain(gateway) == 0


async def test_a_progress_webhook_under_an_apply_lease_waits_for_the_processor(
    gateway: GatewayHarness,
) -> None:
    """A poll applying the job's result holds its apply lease: the webhook is stored
    unprocessed, nothing of it written beside that apply; the processor then finds the
    job finished (a late event)."""
    job_id = await queued_job(gateway)
    store = gateway.store
    async with store.applying(job_id, claimed=False) as held:
        assert held, "the test needs the apply lease (the job is leased by nobody)"
        assert await gateway.deliver(job_id, JobState.RUNNING, logs="step\n") == 200
        (row,) = await event_rows(gateway, job_id)
        assert row.processed_at is None
        assert (await store.get(job_id)).state is JobState.QUEUED
        done = await store.finish(job_id, Outcome(
            state=JobState.COMPLETED, raw_status="succeeded", output="from poll"))
        assert done is not None
    await drain(gateway)
    job = await store.get(job_id)
    assert (job.state, job.output, job.logs) == (JobState.COMPLETED, "from poll", None)
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is not None


async def waiting_for_a_lock(gateway: GatewayHarness) -> bool:
    async with gateway.store.engine.read() as conn:
        query = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return bool((await conn.execute(query)).scalar())


async def test_a_webhook_waits_for_another_transaction_storing_an_event_of_its_job(
    gateway: GatewayHarness,
) -> None:
    """Another process's transaction stores an earlier event of the job (its foreign key
    holds the job's row in KEY SHARE): the webhook's ``FOR UPDATE`` waits for its commit,
    then sees that event unprocessed: both go to the processor, in order."""
    postgres_only(gateway)
    job_id = await queued_job(gateway)
    provider = (await gateway.store.get(job_id)).provider
    earlier = gateway.fake.webhook_body(job_id, JobState.RUNNING, logs="a\n")
    events = sa.table("provider_events", sa.column("job_id"), sa.column("provider"),
                      sa.column("event_key"), sa.column("body"), sa.column("received_at"))
    async with gateway.store.engine.begin() as conn:
        await conn.execute(events.insert().values(
            job_id=job_id, provider=provider, event_key="e" * 64, body=earlier,
            received_at=datetime.now(UTC)))
        later = asyncio.create_task(gateway.deliver(job_id, JobState.RUNNING, logs="a\nb\n"))
        await wait_until(lambda: waiting_for_a_lock(gateway), 10.0,
                         what="the webhook's transaction waiting for the job's row")
        assert not later.done()
    assert await later == 200
    first, second = await event_rows(gateway, job_id)
    assert first.processed_at is None and second.processed_at is None
    assert (await gateway.store.get(job_id)).state is JobState.QUEUED  # neither applied
    assert await drain(gateway) == 2
    job = await gateway.store.get(job_id)
    assert (job.state, job.logs) == (JobState.RUNNING, "a\nb\n")
    assert all(row.processed_at is not None for row in await event_rows(gateway, job_id))
