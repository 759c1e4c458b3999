"""PostgreSQL's pool: the lifecycle's reserved connections (gateway/store/engine/aio.py,
``reserved``) against tasks that a request's task creates while it holds a shared
connection. asyncio copies the context into every task it creates, so what marks "this
task already holds a shared connection" (a nested checkout takes no second one) must not
mark the tasks it spawned: they are request work of their own, outliving the checkout.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from gateway.store.engine import aio

pytestmark = pytest.mark.every_backend


async def test_a_task_spawned_while_a_shared_connection_is_held_counts_as_request_work(
    database_url: str, backend: str
) -> None:
    """A request holds a shared connection and starts a task (a refresh, a batched read)
    that reads later, after the request gave its connection back. Once other requests
    hold every shared connection, that task's read waits (and times out) like any other
    request's: it does not take the lifecycle's reserved one."""
    if backend != "postgres":
        pytest.skip("one pooled connection on SQLite, none reserved")
    engine = aio.create_engine(
        database_url, pool_size=3, max_overflow=0, reserved=1, pool_timeout=0.5,
    )
    go, release = asyncio.Event(), asyncio.Event()
    held = 0

    async def later_read() -> int:
        await go.wait()
        async with engine.read() as conn:
            return int((await conn.execute(sa.text("SELECT 7"))).scalar_one())

    async def request() -> asyncio.Task[int]:
        async with engine.read() as conn:
            await conn.execute(sa.text("SELECT 1"))
            return asyncio.create_task(later_read())  # spawned while holding one

    async def hold() -> None:
        nonlocal held
        async with engine.read() as conn:
            await conn.execute(sa.text("SELECT 1"))
            held += 1
            await release.wait()

    holders: list[asyncio.Task[None]] = []
    try:
        spawned = await asyncio.create_task(request())  # its checkout is given back
        holders = [asyncio.create_task(hold()) for _ in range(2)]
        deadline = asyncio.get_running_loop().time() + 10
        while held < 2:  # every shared connection is held by another request
            assert not any(t.done() for t in holders)
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        go.set()
        with pytest.raises(sa.exc.TimeoutError, match="reserved"):
            await asyncio.wait_for(spawned, timeout=10)
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)
        await engine.dispose()


async def test_the_batched_get_reads_hold_no_reserved_connection(
    database_url: str, backend: str
) -> None:
    """PostgreSQL's batched version reads (gateway/store/engine/pgreads.py) keep one
    pooled connection for themselves, taken by a GET: request work. With every shared
    connection held by other requests, the lifecycle must still find its reserved one."""
    if backend != "postgres":
        pytest.skip("PostgreSQL's batched reads")
    from gateway.store.engine.pgreads import RowReads

    engine = aio.create_engine(
        database_url, pool_size=3, max_overflow=0, reserved=1, pool_timeout=0.5,
    )
    release = asyncio.Event()
    held = 0

    async def hold() -> None:
        nonlocal held
        async with engine.read() as conn:
            await conn.execute(sa.text("SELECT 1"))
            held += 1
            await release.wait()

    reads = RowReads(engine, "SELECT x FROM unnest($1::text[]) AS x")
    holders: list[asyncio.Task[None]] = []
    try:
        holders = [asyncio.create_task(hold()) for _ in range(2)]
        deadline = asyncio.get_running_loop().time() + 10
        while held < 2:
            assert not any(t.done() for t in holders)
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await reads.row("a")  # a GET's version read, whatever it answers

        async def lifecycle() -> int:
            async with engine.begin() as conn:
                return int((await conn.execute(sa.text("SELECT 7"))).scalar_one())

        task = asyncio.create_task(lifecycle(), context=aio.lifecycle_context())
        assert await asyncio.wait_for(task, timeout=10) == 7
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)
        await reads.close()
        await engine.dispose()
