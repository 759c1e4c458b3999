"""In-process wake-ups of waiters on a job (gateway/notify.py): a change made after a
waiter was woken, before it ran again, reaches it; a waiter not woken times out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from contracts.job import Job, JobState
from gateway.notify import Notifier


def job(state: JobState) -> Job:
    return Job(
        id="p" * 26, state=state, model="o/n", version="hidden", route="o/n", provider="fake",
        input={}, created_at=datetime(2026, 12, 3, tzinfo=UTC),
    )


async def test_a_change_after_the_wake_before_the_waiter_runs_is_the_one_it_gets() -> None:
    notifier = Notifier()
    waiting = asyncio.create_task(notifier.wait_job("p" * 26, 5.0))
    await asyncio.sleep(0)  # the waiter is registered
    queued, completed = job(JobState.QUEUED), job(JobState.COMPLETED)
    notifier.job_changed("p" * 26, queued)  # wakes it ...
    notifier.job_changed("p" * 26, completed)  # ... and this comes before it runs again
    assert await waiting == (True, completed)
    assert notifier.waited_jobs() == []


async def test_an_unknown_later_change_asks_the_waiter_to_read_the_store() -> None:
    notifier = Notifier()
    waiting = asyncio.create_task(notifier.wait_job("p" * 26, 5.0))
    await asyncio.sleep(0)
    notifier.job_changed("p" * 26, job(JobState.QUEUED))
    notifier.job_changed("p" * 26)  # another process's change: not known here
    assert await waiting == (True, None)


async def test_one_change_wakes_with_that_job_and_no_change_times_out() -> None:
    notifier = Notifier()
    waiting = asyncio.create_task(notifier.wait_job("p" * 26, 5.0))
    await asyncio.sleep(0)
    running = job(JobState.RUNNING)
    notifier.job_changed("p" * 26, running)
    assert await waiting == (True, running)
    assert await notifier.wait_job("p" * 26, 0.01) == (False, None)
