"""PostgreSQL connections that die under the gateway (``pg_terminate_backend``: a server
restart, a failover, an idle-connection reaper) cost at most the requests that were using
them: a request whose connection is terminated mid-transaction is tried again on a new
one or answered 503 problem+json (retry), never 500, and stores its prediction once; idle
pooled connections the server closed are replaced unnoticed, without a ping per checkout
(gateway/store/engine/db.py, ``PG_PING_IDLE_S``). Attacking the store's own
asyncio engine (gateway/store/engine/aio.py, 9f2401f); it held, as before it.

Only this test's own database's connections are terminated; SQLite has none to kill.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from gateway.store.schema import jobs
from tests.support.databases import PG_ADMIN_DSN
from tests.support.gateway import VERSION
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def _terminate(database: str, but: asyncpg.Connection | None = None) -> list[int]:
    """Terminate the connections to ``database`` (not ``but``'s); their server pids."""
    spared = but.get_server_pid() if but is not None else 0
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        rows = await admin.fetch(
            "SELECT pid, pg_terminate_backend(pid) AS done FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid() AND pid <> $2", database, spared,
        )
        return [int(row["pid"]) for row in rows if row["done"]]
    finally:
        await admin.close()


async def _gone(pids: list[int]) -> bool:
    """Whether none of the server processes ``pids`` is there any more (each has closed
    its socket)."""
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        return not await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])", pids)
    finally:
        await admin.close()


async def _waiting(locker: asyncpg.Connection, database: str) -> bool:
    """Whether a connection to ``database`` waits for a lock (on the locker's table)."""
    return bool(await locker.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
        " AND wait_event_type = 'Lock'", database,
    ))


async def test_killed_connections_cost_no_500_and_no_prediction(
    make_gateway: Any, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("PostgreSQL's connections only")
    gateway = await make_gateway()
    database = make_url(str(gateway.store.engine.url)).database
    assert database
    warm = await gateway.create({"version": VERSION, "input": {"prompt": "warm"}})  # pooled

    killed = await _terminate(database)  # idle in the pool: replaced, seen closed
    assert killed
    await wait_until(lambda: _gone(killed), what="the terminated server processes gone")
    assert (await gateway.get(warm["id"]))["id"] == warm["id"]  # a read: 200, not 503
    await gateway.create({"version": VERSION, "input": {"prompt": "after idle kill"}})

    async def create(n: int) -> tuple[int, str, str]:
        response = await gateway.client.post(
            "/v1/predictions", headers=gateway.headers,
            json={"version": VERSION, "input": {"prompt": f"p{n}"}},
        )
        return response.status, response.content_type, await response.text()

    # Connections killed while requests use them: each request waits, inside its
    # transaction, for a lock this test holds, until its connection is terminated.
    locker = await asyncpg.connect(PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{database}")
    try:
        await locker.execute("BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        tasks = [asyncio.create_task(create(n)) for n in range(6)]
        await wait_until(lambda: _waiting(locker, database), what="requests waiting on the lock")
        assert await _terminate(database, but=locker)
        await locker.execute("ROLLBACK")  # a request that tries again is not held back
        answers = await asyncio.gather(*tasks)
    finally:
        await locker.close()
    for status, content_type, text in answers:
        assert status in (201, 503), text
        if status == 503:
            assert content_type == "application/problem+json", text
    made = await gateway.create({"version": VERSION, "input": {"prompt": "after"}})
    assert (await gateway.get(made["id"]))["status"] == "starting"
    created = 2 + [status for status, _, _ in answers].count(201) + 1
    count = sa.select(sa.func.count()).select_from(jobs)
    async with gateway.store.engine.connect() as conn:  # each 201 stored once, no other
        assert (await conn.execute(count)).scalar() == created
