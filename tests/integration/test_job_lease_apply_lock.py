"""The apply lease is taken only while no provider event of the job waits, and an event
stored in a transaction that commits while the poll takes the lease is no exception
(docs/lifecycle.md, "Leases during an apply": on PostgreSQL the take locks the job's row
first, and the event's insert holds a key-share lock on it until it commits; SQLite's
writers are serialised). The event's transaction is held open on a connection of the
test's own while the poll, having fetched the finished job, takes the lease (both
backends). Without the row lock, on PostgreSQL, the poll copies the outputs beside the
event.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from contracts.job import JobState
from gateway.store.schema import provider_events
from tests.integration.test_job_lease_apply import (  # noqa: F401 (files: the fixture)
    SlowFiles,
    files,
    finishes,
    job_row,
    loop,
    one_job,
    unprocessed,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

WAITING_LOCKS = "select count(*) from pg_locks where not granted"


async def test_an_event_committed_while_a_poll_takes_the_apply_lease_wins(
    make_gateway: Any, files: SlowFiles, database_url: str, backend: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second, job_id = await one_job(make_gateway)
    await first.settle()  # submitted, queued at the provider
    output = finishes(job_id, files, first, second)
    files.release.set()
    body = first.fake.webhook_body(job_id, JobState.COMPLETED, output=output)
    row = {"job_id": job_id, "provider": "fake", "event_key": secrets.token_hex(8),
           "body": body, "received_at": datetime.now(UTC)}
    fetching, fetched = asyncio.Event(), asyncio.Event()
    fetch = first.fake.fetch

    async def held_fetch(*args: Any) -> Any:  # the poll's fetch, held while the event is stored
        fetching.set()
        await fetched.wait()
        return await fetch(*args)

    monkeypatch.setattr(first.fake, "fetch", held_fetch)
    first.clock.advance(10)  # the next poll is due
    round_ = asyncio.create_task(loop(first, "poller").run_once())  # claims, then fetches
    await asyncio.wait_for(fetching.wait(), 10)
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as other:
            event = await other.begin()
            await other.execute(provider_events.insert().values(**row))  # not yet committed
            fetched.set()
            if backend == "postgres":  # the take waits for the event's key-share lock

                async def take_waits() -> bool:
                    if round_.done():
                        return True
                    async with first.store.engine.connect() as conn:
                        return bool((await conn.execute(sa.text(WAITING_LOCKS))).scalar())

                await wait_until(take_waits, what="the take waiting for the event's lock")
            await event.commit()
        assert await round_ == 1
    finally:
        await engine.dispose()
    assert files.requests == 0  # the poll left the job to its event
    job = await job_row(first, job_id)
    assert (job.state, job.lease_owner) == ("queued", None)
    assert await loop(second, "events").run_once() == 1
    assert (await second.get(job_id))["status"] == "succeeded"
    assert files.requests == 1
    assert await unprocessed(second, job_id) == 0
