"""A provider webhook applied in the transaction that stores it (gateway/store/applied.py),
on every backend: on a SQLite file (gateway/store/applied.py) and on PostgreSQL
(gateway/store/pgapplied.py) a progress webhook of a job without a webhook, next in order
for its job, is stored already processed and the job written, with no round of the event
processor; whenever something of the job waits (an earlier unprocessed event) or the job
has a webhook (its outbox rows), the event is stored for the processor as before and
applied there, in order.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.http import keys
from gateway.store.schema import outbox
from tests.support.gateway import GatewayHarness
from tests.support.outbox import event_rows, events_loop, processor_only, queued_job, start_job

pytestmark = pytest.mark.every_backend  # a SQLite file and PostgreSQL take the path


def applies_as_stored(gateway: GatewayHarness) -> bool:
    applies: bool = gateway.app[keys.INTAKE]._events.applies_as_stored
    assert applies, "a SQLite file and PostgreSQL both apply as they store"
    return applies


async def drain(gateway: GatewayHarness) -> int:
    applied = 0
    while n := await events_loop(gateway).run_once():
        applied += n
    return applied


async def test_a_progress_webhook_is_applied_as_it_is_stored_on_sqlite(
    gateway: GatewayHarness,
) -> None:
    job_id = await queued_job(gateway)
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    (row,) = await event_rows(gateway, job_id)
    if applies_as_stored(gateway):
        assert row.processed_at is not None and row.lease_owner is None
        job = await gateway.store.get(job_id)  # written before the webhook was answered
        assert (job.state, job.logs) == (JobState.RUNNING, "step 1\n")
        assert await drain(gateway) == 0  # nothing left for the processor
    else:
        assert row.processed_at is None  # stored for the processor
        assert await drain(gateway) == 1
    job = await gateway.store.get(job_id)
    assert (job.state, job.logs) == (JobState.RUNNING, "step 1\n")
    assert job.started_at is not None
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is not None


async def test_a_duplicate_webhook_is_stored_once_and_changes_nothing(
    gateway: GatewayHarness,
) -> None:
    job_id = await queued_job(gateway)
    for _ in range(2):
        assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
        await drain(gateway)
    written = await gateway.store.get(job_id)
    assert len(await event_rows(gateway, job_id)) == 1
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    assert await drain(gateway) == 0
    assert await gateway.store.get(job_id) == written


async def test_a_webhook_behind_an_unprocessed_event_of_its_job_waits_its_turn(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress webhook that arrives while an earlier event of its job is not applied
    yet is stored for the processor, and applied after it, in order."""
    job_id = await queued_job(gateway)
    with monkeypatch.context() as patched:
        processor_only(gateway, patched)  # the first one waits for a round
        assert await gateway.deliver(job_id, JobState.RUNNING, logs="a\n") == 200
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="a\nb\n") == 200
    first, later = await event_rows(gateway, job_id)
    assert first.processed_at is None and later.processed_at is None
    assert (await gateway.store.get(job_id)).state is JobState.QUEUED  # neither applied
    assert await drain(gateway) == 2
    job = await gateway.store.get(job_id)
    assert (job.state, job.logs) == (JobState.RUNNING, "a\nb\n")


async def test_a_terminal_webhook_is_finished_as_it_is_stored_then_a_second_is_late(
    gateway: GatewayHarness,
) -> None:
    """The finalizer's outcome recorded in the storing transaction on SQLite (an output
    without files); a second terminal webhook changes nothing (the finalizer is
    idempotent)."""
    job_id = await queued_job(gateway)
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    if applies_as_stored(gateway):
        assert await drain(gateway) == 0
    else:
        assert await drain(gateway) == 1
    job = await gateway.store.get(job_id)
    assert (job.state, job.output) == (JobState.COMPLETED, "done")
    assert job.completed_at is not None
    assert await gateway.deliver(job_id, JobState.FAILED, error="too late") == 200
    assert await drain(gateway) == 1  # stored for the processor: a late outcome
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="late\n") == 200
    if applies_as_stored(gateway):  # a late progress event: stored processed, no write
        assert (await event_rows(gateway, job_id))[-1].processed_at is not None
    await drain(gateway)
    assert await gateway.store.get(job_id) == job
    rows = await event_rows(gateway, job_id)
    assert len(rows) == 3 and all(row.processed_at is not None for row in rows)


async def test_a_job_with_a_webhook_is_applied_by_the_processor_with_its_outbox_rows(
    gateway: GatewayHarness,
) -> None:
    job_id = await start_job(gateway, "http://127.0.0.1:9/hook", events=["logs"])
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is None  # the outbox row is written by the processor's write
    assert await drain(gateway) == 1
    async with gateway.store.engine.connect() as conn:
        query = sa.select(outbox.c.event).where(outbox.c.job_id == job_id)
        assert "logs" in set((await conn.execute(query)).scalars())


async def test_progress_applied_as_stored_then_the_terminal_event_finishes_the_job(
    gateway: GatewayHarness,
) -> None:
    job_id = await queued_job(gateway)
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="a\n") == 200
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="a\nb\n") == 200
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done", logs="a\nb\n") == 200
    await drain(gateway)
    job = await gateway.store.get(job_id)
    assert (job.state, job.output, job.logs) == (JobState.COMPLETED, "done", "a\nb\n")
    rows = await event_rows(gateway, job_id)
    assert len(rows) == 3 and all(row.processed_at is not None for row in rows)
