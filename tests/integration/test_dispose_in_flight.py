"""Shutdown while a detached store task holds a connection: the engine's dispose leaves
no connection open behind it.

The group-commit flushers (gateway/store/engine/group.py, creates.py) run on tasks of their own
(a caller that goes away does not cancel the others' commit), and a heartbeat's
:class:`gateway.store.heartbeat.Repeat` whose ``stop()`` is cancelled lets its run finish
alone. Either may still hold a connection when the gateway's cleanup disposes of the
engine (gateway/app.py). ``dispose`` closes only the connections in the pool; one checked
out was handed back afterwards to the pool just replaced, and stayed open there: a
PostgreSQL backend (pg_stat_activity) or the SQLite file's descriptors outlived the
engine. A connection taken before a dispose is now closed when it is returned
(:meth:`gateway.store.engine.aio.Connection.close`; docs/reliability.md, "Shutdown and the store").
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from gateway.store.creates import CreateBatcher
from gateway.store.engine import db
from gateway.store.engine.group import Group
from gateway.store.heartbeat import Repeat
from tests.support.databases import database_url_for
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

HOLD_S = 0.5  # how long the detached task keeps its transaction open


async def _open_connections(backend: str, url: str) -> int:
    """Connections to the database still open: PostgreSQL backends other than ours,
    or this process's descriptors of the SQLite file."""
    if backend == "sqlite":
        path = url.split("///", 1)[1]
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(path)
            except OSError:
                continue
        return count
    name = url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        ))
    finally:
        await conn.close()


async def _in_group(work: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A create handler awaiting a group's flush; returns how to cancel it."""
    async def run(items: list[int]) -> list[int | BaseException]:
        await work()
        return list(items)

    caller = asyncio.create_task(Group("test", run)(1))

    async def cancel() -> None:
        caller.cancel()  # the flush goes on: shielded from its callers

    return cancel


async def _in_creates(work: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A create handler awaiting the create batcher's flush (its insert replaced by
    ``work``); returns how to cancel it."""
    batcher = CreateBatcher(store=None)  # type: ignore[arg-type]

    async def insert(group: list[Any]) -> list[Any]:
        await work()
        return [None] * len(group)

    batcher._insert = insert  # type: ignore[method-assign]
    caller = asyncio.create_task(batcher.create(None))  # type: ignore[arg-type]

    async def cancel() -> None:
        caller.cancel()

    return cancel


async def _in_repeat(work: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A heartbeat whose timer has fired; returns its stop(), cancelled twice."""
    timer = Repeat(work, 0.01, "test_failure")

    async def cancel() -> None:
        stopping = asyncio.create_task(timer.stop())
        await asyncio.sleep(0)
        for _ in range(2):
            stopping.cancel()
            await asyncio.sleep(0)

    return cancel


@pytest.mark.parametrize(
    "holder", [_in_group, _in_creates, _in_repeat], ids=["group-flush", "create-flush", "repeat"]
)
async def test_dispose_leaves_no_connection_of_a_task_in_flight(
    backend: str, tmp_path: Path, holder: Callable[..., Awaitable[Callable[[], Awaitable[None]]]],
) -> None:
    async with database_url_for(backend, tmp_path) as url:
        engine = db.create_engine(url)
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        holding = asyncio.Event()
        finished = asyncio.Event()

        async def work() -> None:
            if holding.is_set():
                return
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
                holding.set()
                await asyncio.sleep(HOLD_S)  # the commit is in flight at shutdown
            finished.set()

        cancel = await holder(work)
        await asyncio.wait_for(holding.wait(), 5)
        await cancel()
        await engine.dispose()
        await asyncio.wait_for(finished.wait(), 5)

        async def none_open() -> bool:
            return await _open_connections(backend, url) == 0

        await wait_until(none_open, timeout_s=5, what="no connection of the engine open")
        async with engine.begin() as conn:  # the engine still works after a dispose
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 1
        await engine.dispose()
