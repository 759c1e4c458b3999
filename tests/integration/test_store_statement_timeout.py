"""A PostgreSQL statement that gets no answer ends after ``[gateway]
database_statement_timeout_s`` (docs/reliability.md, "Dependency outages"): a store call
raises an error the store calls transient (the per-item boundary tries it again later),
its connection is closed rather than pooled again (it may wait on a dead peer), and the
next call is answered as ever.

The statement is held by another session's ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE``
(what a write on a silently dead connection looks like from the caller: no answer).
SQLite waits on its busy timeout instead (gateway/store/engine/inline.py): PostgreSQL only.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
import sqlalchemy as sa

from gateway.store.engine import db, errors
from gateway.store.schema import jobs

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_a_statement_without_an_answer_times_out_transient(
    database_url: str, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("SQLite waits on its busy timeout (gateway/store/engine/inline.py)")
    engine = db.create_engine(database_url, statement_timeout_s=0.5)
    locker = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with engine.connect() as conn:  # a pooled connection, opened beforehand
            before = (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar()
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(Exception) as raised:
            async with engine.begin() as conn:
                await asyncio.wait_for(
                    conn.execute(sa.select(sa.func.count()).select_from(jobs)), timeout=10)
        elapsed = time.monotonic() - started
        assert errors.transient(raised.value), repr(raised.value)
        assert 0.4 <= elapsed < 3.0, elapsed
        await lock.rollback()
        for _ in range(3):  # the pool answers again, promptly, on a new connection
            async with engine.connect() as conn:
                result = await conn.execute(sa.select(sa.func.count()).select_from(jobs))
                assert result.scalar() == 0
                after = (await conn.execute(sa.select(sa.func.pg_backend_pid()))).scalar()
                assert after != before  # the timed-out one (maybe on a dead peer) is closed
    finally:
        await locker.close()
        await engine.dispose()
