"""GET's version reads (gateway/store/reader.py; on PostgreSQL batched through asyncpg,
gateway/store/engine/pgreads.py): a read asked after a commit sees it, even while an
earlier read is still out; concurrent reads of many ids each get their own row; a
cancelled read leaves the others answered (docs/lifecycle.md, "Reads of a prediction")."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store.reader import JobReader
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the batched PostgreSQL reads are the point

BODY = {"version": VERSION, "input": {"text": "v"}}


async def bump(gateway: GatewayHarness, job_id: str, logs: str) -> None:
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(logs=logs))


async def test_a_read_asked_after_a_commit_sees_it(gateway: GatewayHarness) -> None:
    job_id = (await gateway.create(BODY))["id"]
    reader = JobReader(gateway.store)
    try:
        for n in range(20):
            earlier = asyncio.ensure_future(reader.version(job_id))  # may still be out
            await asyncio.sleep(0)
            await bump(gateway, job_id, f"line {n}")
            later = await reader.version(job_id)
            current = await reader.current(job_id)
            assert current is not None
            version = current[1][0]
            assert later is not None and later[0][0] == version
            assert (await earlier) is not None
    finally:
        await reader.close()


async def test_concurrent_reads_each_get_their_own_row(gateway: GatewayHarness) -> None:
    ids = [(await gateway.create(BODY))["id"] for _ in range(30)]
    for job_id in ids[::3]:
        await bump(gateway, job_id, "changed")
    reader = JobReader(gateway.store)
    try:
        first = asyncio.ensure_future(reader.version(ids[0]))
        cancelled = asyncio.ensure_future(reader.version(ids[1]))
        await asyncio.sleep(0)
        cancelled.cancel()
        got = await asyncio.gather(*(reader.version(i) for i in [*ids, "0" * 26]))
        assert got[-1] is None
        for job_id, found in zip(ids, got[:-1], strict=True):
            assert found is not None
            current = await reader.current(job_id)
            assert current is not None and found[0][0] == current[1][0]
            assert found[1:] == ("default", "control")
        assert (await first) == got[0]
    finally:
        await reader.close()


async def test_concurrent_current_reads_are_the_store_s_jobs(gateway: GatewayHarness) -> None:
    ids = [(await gateway.create(BODY))["id"] for _ in range(12)]
    for job_id in ids[::2]:
        await bump(gateway, job_id, "changed")
    reader = JobReader(gateway.store)
    try:
        got = await asyncio.gather(*(reader.current(i) for i in [*ids, "0" * 26]))
        assert got[-1] is None
        for job_id, found in zip(ids, got[:-1], strict=True):
            assert found is not None
            job, version = found
            assert job == await gateway.store.get(job_id)  # times in UTC, JSON decoded
            assert job.created_at.tzinfo is not None and job.input == BODY["input"]
            assert version == (await reader.version(job_id) or ((0, None),))[0]
        await bump(gateway, ids[0], "again")
        after = await reader.current(ids[0])
        assert after is not None and after[0].logs == "again"
        assert got[0] is not None and after[1][0] > got[0][1][0]
    finally:
        await reader.close()
