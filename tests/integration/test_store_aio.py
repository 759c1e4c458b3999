"""The store's asyncio engine (gateway/store/engine/aio.py), made as the gateway makes it
(:func:`gateway.store.engine.db.create_engine`), on SQLite and PostgreSQL: what the store relies on
from it: a transaction committed or rolled back with its block, nothing kept that was not
committed, results readable after the connection went back, executemany, ``run_sync``, and a
cancelled block handing its connection back to the pool, and pooling before and after a
dispose."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from gateway.store.engine import aio, db, errors

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[aio.Engine]:
    engine = db.create_engine(database_url)
    yield engine
    await engine.dispose()


@pytest.fixture
async def table(engine: aio.Engine) -> AsyncIterator[sa.Table]:
    """A table of this test's own (the PostgreSQL database is shared by the session)."""
    probe = sa.Table(
        f"aio_probe_{secrets.token_hex(4)}", sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True), sa.Column("name", sa.Text),
    )
    async with engine.begin() as conn:
        await conn.run_sync(probe.create)
    yield probe
    async with engine.begin() as conn:
        await conn.run_sync(probe.drop)


async def names(engine: aio.Engine, table: sa.Table) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(table.c.name).order_by(table.c.id))).scalars())


async def test_begin_commits_when_the_block_ends(engine: aio.Engine, table: sa.Table) -> None:
    async with engine.begin() as conn:
        assert conn.in_transaction()
        await conn.execute(table.insert().values(id=1, name="kept"))
    assert await names(engine, table) == ["kept"]


async def test_begin_rolls_back_when_the_block_raises(engine: aio.Engine, table: sa.Table) -> None:
    with pytest.raises(RuntimeError, match="after the insert"):
        async with engine.begin() as conn:
            await conn.execute(table.insert().values(id=1, name="gone"))
            raise RuntimeError("after the insert")
    assert await names(engine, table) == []
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_connect_keeps_nothing_it_did_not_commit(
    engine: aio.Engine, table: sa.Table
) -> None:
    async with engine.connect() as conn:
        await conn.execute(table.insert().values(id=1, name="never committed"))
        assert conn.in_transaction()  # begun by the statement
    assert await names(engine, table) == []


async def test_a_refused_statement_raises_the_database_error_and_keeps_nothing(
    engine: aio.Engine, table: sa.Table
) -> None:
    async with engine.begin() as conn:
        await conn.execute(table.insert().values(id=1, name="first"))
    with pytest.raises(sa.exc.IntegrityError) as raised:
        async with engine.begin() as conn:
            await conn.execute(table.insert().values(id=2, name="second"))
            await conn.execute(table.insert().values(id=1, name="same key"))
    assert errors.refused(raised.value)
    assert await names(engine, table) == ["first"]


async def test_results_are_read_after_the_connection_went_back(
    engine: aio.Engine, table: sa.Table
) -> None:
    async with engine.begin() as conn:
        await conn.execute(table.insert(), [{"id": i, "name": f"n{i}"} for i in range(3)])
    async with engine.connect() as conn:
        result = await conn.execute(sa.select(table.c.id, table.c.name).order_by(table.c.id))
        raw = await conn.exec_driver_sql(f"SELECT count(*) FROM {table.name}")
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert [tuple(row) for row in result] == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert raw.scalar_one() == 3


async def test_run_sync_runs_a_sync_function_on_the_connection(
    engine: aio.Engine, table: sa.Table
) -> None:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync, name: sa.inspect(sync).has_table(name),
                                    table.name)
    assert found is True


async def test_a_cancelled_block_hands_its_connection_back(
    engine: aio.Engine, table: sa.Table
) -> None:
    inside, never = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with engine.begin() as conn:
            await conn.execute(table.insert().values(id=1, name="cancelled"))
            inside.set()
            await never.wait()

    task = asyncio.ensure_future(hold())
    await inside.wait()
    assert engine.sync_engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert await names(engine, table) == []  # rolled back, and the pool serves again


async def test_connections_are_pooled_before_and_after_a_dispose(
    engine: aio.Engine, table: sa.Table,
) -> None:
    """Returned connections go back to the pool, not closed (aio.Connection.close closes
    only one taken before a dispose): 5 concurrent workers x 20 transactions open at most
    5 connections, and as few again once the engine is used after a dispose."""
    opened: list[object] = []
    sa.event.listen(engine.sync_engine, "connect", lambda dbapi, _record: opened.append(dbapi))

    async def work() -> None:
        for _ in range(20):
            async with engine.begin() as conn:
                await conn.execute(table.select())
            async with engine.connect() as conn:
                await conn.execute(table.select())

    await asyncio.gather(*(work() for _ in range(5)))
    assert len(opened) <= 5  # (SQLite's one connection may be open already)
    await engine.dispose()
    opened.clear()
    await asyncio.gather(*(work() for _ in range(5)))
    assert 1 <= len(opened) <= 5


async def test_a_read_on_postgresql_opens_no_transaction_and_leaves_none_behind(
    engine: aio.Engine, table: sa.Table, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("read() is connect() on SQLite")
    async with engine.begin() as conn:
        await conn.execute(table.insert().values(id=1, name="seen"))

    def driver(conn: aio.Connection) -> object:
        assert conn.sync_connection is not None
        return conn.sync_connection.connection.driver_connection

    async with engine.read() as conn:  # one round trip: no BEGIN before the SELECT
        assert list((await conn.execute(sa.select(table.c.name))).scalars()) == ["seen"]
        assert not driver(conn).is_in_transaction()  # type: ignore[attr-defined]
    async with engine.connect() as conn:  # the pooled connection is transactional again
        await conn.execute(sa.select(table.c.name))
        assert driver(conn).is_in_transaction()  # type: ignore[attr-defined]
    async with engine.begin() as conn:  # and a write still commits in its transaction
        await conn.execute(table.insert().values(id=2, name="kept"))
    assert await names(engine, table) == ["seen", "kept"]


async def test_the_lifecycle_takes_a_reserved_connection_while_reads_hold_the_shared_ones(
    database_url: str, backend: str
) -> None:
    """Checkouts outside the lifecycle hold at most ``pool_size - reserved`` connections;
    one more waits (and times out with the pool's error), where the lifecycle's (and a
    nested checkout of a task already holding a shared one) is served at once."""
    if backend != "postgres":
        pytest.skip("one pooled connection on SQLite, none reserved")
    gateway = db.create_engine(database_url)
    assert gateway.shared == db.PG_POOL_SIZE - db.PG_POOL_RESERVED
    await gateway.dispose()
    engine = aio.create_engine(
        database_url,
        pool_size=3, max_overflow=0, reserved=1, pool_timeout=0.5,
    )
    release = asyncio.Event()
    held = 0

    async def hold() -> None:
        nonlocal held
        async with engine.read() as conn:
            await conn.execute(sa.text("SELECT 1"))
            async with engine.read() as nested:  # takes no second shared one
                await nested.execute(sa.text("SELECT 1"))
            held += 1
            await release.wait()

    try:
        holders = [asyncio.create_task(hold()) for _ in range(2)]
        deadline = asyncio.get_running_loop().time() + 10
        while held < 2:  # both hold their shared connection
            assert not any(t.done() for t in holders)
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        with pytest.raises(sa.exc.TimeoutError, match="reserved"):
            async with engine.read():
                pass

        async def lifecycle() -> int:
            async with engine.begin() as conn:
                return int((await conn.execute(sa.text("SELECT 7"))).scalar_one())

        task = asyncio.create_task(lifecycle(), context=aio.lifecycle_context())
        assert await asyncio.wait_for(task, timeout=10) == 7
        release.set()
        await asyncio.gather(*holders)
        async with engine.read() as conn:  # the shared ones are given back
            assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1
    finally:
        release.set()
        await engine.dispose()
