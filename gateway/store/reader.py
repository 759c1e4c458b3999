"""Reads of the jobs table that take no lock and build no statement per request.

The API's GET and list are the gateway's hottest paths (docs/benchmarks.md). On SQLite
they do not go through the async engine (whose one pooled connection also carries every
write, ``BEGIN IMMEDIATE`` included): a second connection of the standard library's
``sqlite3`` module, made read-only with ``PRAGMA query_only``, answers them directly on
the event loop thread. In WAL mode a reader never waits for the writer and sees the last
commit of every process sharing the file; a primary-key read costs microseconds, less
than a hand-off to a thread. Its statements are fixed strings, prepared once by
``sqlite3``'s statement cache. If the file cannot be read that way (a ``:memory:``
database, a busy checkpoint), the engine serves the read instead.

On PostgreSQL reads go through the engine with statements built once at import
(SQLAlchemy then reuses their compiled form).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts.errors import NotFound
from contracts.job import Job
from gateway.store.jobs import JobStore
from gateway.store.schema import UTCDateTime, jobs

__all__ = ["JobReader"]

_COLUMNS = [c for c in jobs.c if c.name in Job.model_fields]
_NAMES = [c.name for c in _COLUMNS]
_LIST = ", ".join(_NAMES)
_GET_SQL = f"SELECT {_LIST} FROM jobs WHERE id = ?"  # noqa: S608 (column names, fixed)
_GET = sa.select(*_COLUMNS).where(jobs.c.id == sa.bindparam("job_id"))
READ_TIMEOUT_S = 0.25  # a read waits this long for a checkpoint before the engine takes it


def _sqlite_converter(column: sa.Column[Any]):  # type: ignore[no-untyped-def]
    if isinstance(column.type, UTCDateTime):
        return lambda v: None if v is None else datetime.fromisoformat(v).replace(tzinfo=UTC)
    if isinstance(column.type, sa.JSON):
        # the standard library: orjson would turn integers beyond 64 bits into floats
        return lambda v: None if v is None else json.loads(v)
    if isinstance(column.type, sa.Boolean):
        return lambda v: None if v is None else bool(v)
    return None


_CONVERT = [(i, f) for i, c in enumerate(_COLUMNS) if (f := _sqlite_converter(c)) is not None]


def _sqlite_time(at: datetime) -> str:
    """``at`` as SQLAlchemy's SQLite DATETIME stores it (UTC, microseconds), for comparisons."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class JobReader:
    """Lock-free reads of jobs (see the module docstring).

    Parameters
    ----------
    store : JobStore
        The job store: its engine's URL names the SQLite file, and it serves what the
        SQLite reader cannot.
    """

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._engine: AsyncEngine = store.engine
        self._sqlite: sqlite3.Connection | None = None
        url = self._engine.url
        sqlite_file = self._engine.dialect.name == "sqlite" and url.database not in (
            None, "", ":memory:"
        )
        self._path: str | None = url.database if sqlite_file else None

    def _connection(self) -> sqlite3.Connection | None:
        if self._sqlite is None and self._path is not None:
            conn = sqlite3.connect(
                self._path, timeout=READ_TIMEOUT_S, isolation_level=None,
                check_same_thread=False, cached_statements=64,
            )
            conn.execute("PRAGMA query_only = 1")
            self._sqlite = conn
        return self._sqlite

    def close(self) -> None:
        """Close the SQLite reader, if one was opened."""
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    async def get(self, job_id: str) -> Job:
        """The job with ``job_id``; ``NotFound`` if there is none."""
        conn = self._connection()
        rows: Sequence[Any] | None = None
        if conn is not None:
            try:
                # fetchall steps the statement to its end, so no read transaction stays open
                rows = conn.execute(_GET_SQL, (job_id,)).fetchall()
            except sqlite3.OperationalError:
                rows = None
            else:
                found = _from_sqlite(rows[0]) if rows else None
        if rows is None:
            async with self._engine.connect() as aconn:
                row = (await aconn.execute(_GET, {"job_id": job_id})).first()
            found = None if row is None else Job.model_validate(dict(row._mapping))
        if found is None:
            raise NotFound(f"prediction {job_id!r} does not exist")
        return found

    async def page(
        self,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        after: tuple[datetime, str] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs, newest first (see :meth:`gateway.store.jobs.JobStore.page`)."""
        conn = self._connection()
        if conn is None:
            return await self._store.page(
                limit=limit, before=before, after=after,
                created_after=created_after, created_before=created_before,
            )
        where: list[str] = []
        params: list[Any] = []
        if after is not None:
            where.append("(created_at > ? OR (created_at = ? AND id > ?))")
            params += [_sqlite_time(after[0]), _sqlite_time(after[0]), after[1]]
        if before is not None:
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            params += [_sqlite_time(before[0]), _sqlite_time(before[0]), before[1]]
        if created_after is not None:
            where.append("created_at > ?")
            params.append(_sqlite_time(created_after))
        if created_before is not None:
            where.append("created_at < ?")
            params.append(_sqlite_time(created_before))
        order = "created_at, id" if after is not None else "created_at DESC, id DESC"
        sql = f"SELECT {_LIST} FROM jobs"  # noqa: S608 (fixed fragments, bound values)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order} LIMIT ?"
        try:
            rows = conn.execute(sql, (*params, limit)).fetchall()
        except sqlite3.OperationalError:
            return await self._store.page(
                limit=limit, before=before, after=after,
                created_after=created_after, created_before=created_before,
            )
        found = [_from_sqlite(row) for row in rows]
        return found[::-1] if after is not None else found


def _from_sqlite(row: Sequence[Any]) -> Job:
    values = list(row)
    for index, convert in _CONVERT:
        values[index] = convert(values[index])
    return Job.model_validate(dict(zip(_NAMES, values, strict=True)))
