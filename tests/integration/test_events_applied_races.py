"""A terminal provider webhook applied as it is stored (gateway/intake.py ``_finishing``,
gateway/store/applied.py) against the other roads to a terminal state: a poll applying
the job's result under its apply lease, and a write of the job between the moment its
outcome was decided and the transaction that stores the webhook. The finalizer records
one outcome, once (docs/architecture.md, invariant 3); the webhook that lost is applied
by the processor as a late event.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.job import JobState
from gateway.finalizer import Finalizer
from gateway.store.records import Outcome, Progress
from tests.support.gateway import GatewayHarness
from tests.support.outbox import drain, event_rows, queued_job

pytestmark = pytest.mark.every_backend  # a SQLite file and PostgreSQL take the path


def finished_lines(caplog: pytest.LogCaptureFixture, job_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.getMessage() == "job_finished" and getattr(r, "job_id", None) == job_id]


async def test_a_terminal_webhook_while_a_poll_applies_the_result_waits_for_that_apply(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture,
) -> None:
    """The poll holds the job's apply lease (copying its outputs, say): the webhook is
    stored for the processor, not recorded beside it; the poll's outcome stands."""
    caplog.set_level(logging.INFO)
    job_id = await queued_job(gateway)
    store = gateway.store
    async with store.applying(job_id, claimed=False) as held:
        assert held, "the test needs the apply lease (the job is leased by nobody)"
        assert await gateway.deliver(job_id, JobState.COMPLETED, output="from webhook") == 200
        assert not (await store.get(job_id)).state.terminal  # nothing recorded meanwhile
        (row,) = await event_rows(gateway, job_id)
        assert row.processed_at is None  # waits for the apply
        done = await store.finish(job_id, Outcome(
            state=JobState.COMPLETED, raw_status="succeeded", output="from poll"))
        assert done is not None
    await drain(gateway)
    job = await store.get(job_id)
    assert (job.state, job.output) == (JobState.COMPLETED, "from poll")
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is not None  # applied as a late event
    assert finished_lines(caplog, job_id) == []  # store.finish logs nothing: no second one


@pytest.mark.parametrize("racer", ["progress", "cancel"])
async def test_a_write_between_the_outcome_and_the_storing_transaction_wins(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    racer: str,
) -> None:
    """The outcome is decided from the job's row as read before the webhook's
    transaction; a write of the job meanwhile (a progress poll, a cancel ended by the
    gateway) makes that outcome stale: the webhook goes to the processor, which finishes
    the job from the row as it is then (progress) or finds it finished (cancel). One
    ``job_finished`` line either way."""
    caplog.set_level(logging.INFO)
    job_id = await queued_job(gateway)
    store = gateway.store
    original = Finalizer.outcome
    raced = False

    async def outcome_then_a_write(self: Finalizer, job: Any, snapshot: Any) -> Outcome:
        nonlocal raced
        decided = await original(self, job, snapshot)
        if not raced:
            raced = True
            if racer == "progress":
                written = await store.apply_progress(
                    job_id, Progress(JobState.RUNNING, "processing", None, "a\nb\n"))
                assert written is not None
            else:
                await self.finish_here(job, JobState.CANCELED, None)
        return decided

    monkeypatch.setattr(Finalizer, "outcome", outcome_then_a_write)
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done", logs="a\n") == 200
    assert raced
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is None  # the stale outcome was not recorded: the processor's
    await drain(gateway)
    job = await store.get(job_id)
    assert job.state is (JobState.COMPLETED if racer == "progress" else JobState.CANCELED)
    assert len(finished_lines(caplog, job_id)) == 1
    rows = await event_rows(gateway, job_id)
    assert len(rows) == 1 and rows[0].processed_at is not None
