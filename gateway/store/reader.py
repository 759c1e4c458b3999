"""Reads of the jobs table that take no lock and build no statement per request.

The API's GET and list are the gateway's hottest paths, and a job's callback token is
read for every provider webhook and every submit (docs/benchmarks.md). On SQLite these
reads do not go through the async engine, whose one pooled connection also carries every
write (``BEGIN IMMEDIATE`` included) and costs several hand-offs to its thread per
statement: :class:`SqliteReads`, a second connection of the standard library's
``sqlite3`` module made read-only with ``PRAGMA query_only``, answers them directly on
the event loop thread. In WAL mode a reader never waits for the writer and sees the last
commit of every process sharing the file; a primary-key read costs microseconds. Its
statements are fixed strings, prepared once by ``sqlite3``'s statement cache. When the
file cannot be read that way (``:memory:``, a busy checkpoint) the engine serves the
read instead; on PostgreSQL the engine always does, with statements built once here.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from contracts.job import Job
from gateway.rollout.spec import HIDDEN_ARMS
from gateway.store.engine.aio import Engine
from gateway.store.engine.pgreads import RowReads
from gateway.store.engine.walstamp import WalStamp
from gateway.store.jobrows import COLUMNS as _COLUMNS
from gateway.store.jobrows import CURRENT_SQL as _PG_CURRENT_SQL
from gateway.store.jobrows import NAMES as _NAMES
from gateway.store.jobrows import VERSIONS_SQL as _PG_VERSIONS_SQL
from gateway.store.jobrows import job_and_version
from gateway.store.schema import UTCDateTime, jobs
from gateway.store.versions import SqliteVersions

__all__ = [
    "GET_JOB", "GET_LEASED_JOB", "ROWS_SQL", "JobReader", "RowVersion", "SqliteReads", "job_of",
]

_LIST = ", ".join(_NAMES)
_GET_SQL = f"SELECT {_LIST} FROM jobs WHERE id = ?"  # noqa: S608 (column names, fixed)
_CALLBACK_SQL = "SELECT provider, callback_token FROM jobs WHERE id = ?"
ROWS_SQL = f"SELECT {_LIST} FROM jobs WHERE id IN ({{}})"  # noqa: S608 (format: placeholders)
"""The rows :meth:`SqliteReads.rows` reads, ``{}`` for the ``IN`` list's placeholders
(:func:`gateway.store.engine.fastwrite.in_list`)."""
GET_JOB = sa.select(*_COLUMNS).where(jobs.c.id == sa.bindparam("job_id"))
# A job with its lease (the provider-event processor: gateway/store/applying.py).
_LEASED_SQL = f"SELECT {_LIST}, lease_owner, leased_until FROM jobs WHERE id = ?"  # noqa: S608
GET_LEASED_JOB = GET_JOB.add_columns(jobs.c.lease_owner, jobs.c.leased_until)
# A row's version (raised by a trigger on every UPDATE, migration 0012) and when it was
# last written, with the two columns that say who may see it: GET's one small read.
_VERSION_SQL = "SELECT row_version, updated_at, tenant, arm FROM jobs WHERE id = ?"
_CURRENT_SQL = f"SELECT {_LIST}, row_version, updated_at FROM jobs WHERE id = ?"  # noqa: S608
GET_VERSION = sa.select(jobs.c.row_version, jobs.c.updated_at, jobs.c.tenant,
                        jobs.c.arm).where(jobs.c.id == sa.bindparam("job_id"))
GET_CURRENT = GET_JOB.add_columns(jobs.c.row_version, jobs.c.updated_at)
RowVersion = tuple[int, Any]
"""``(row_version, updated_at)`` of a job's row: equal values, equal row (what it shows)."""
_NOT_HIDDEN = "arm NOT IN ({})".format(", ".join(f"'{arm}'" for arm in HIDDEN_ARMS))
READ_TIMEOUT_S = 0.25  # a read waits this long for a checkpoint before the engine takes it


def _sqlite_converter(column: sa.Column[Any]) -> Callable[[Any], Any] | None:
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
    """``at`` as SQLAlchemy's SQLite DATETIME stores it (UTC, microseconds)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _bound(params: Sequence[Any]) -> list[Any]:
    return [_sqlite_time(p) if isinstance(p, datetime) else p for p in params]


def job_of(row: Sequence[Any]) -> Job:
    """A row of :meth:`SqliteReads.rows` as a :class:`~contracts.job.Job`."""
    return _from_sqlite(row)


def _from_sqlite(row: Sequence[Any]) -> Job:
    values = list(row)
    for index, convert in _CONVERT:
        values[index] = convert(values[index])
    return Job.model_validate(dict(zip(_NAMES, values, strict=True)))


class SqliteReads:
    """Synchronous reads through a read-only ``sqlite3`` connection (module docstring).

    Every method returns None when it cannot answer (not a SQLite file, or the file is
    busy): the caller then asks the engine. No I/O until the first read.
    """

    def __init__(self, engine: Engine) -> None:
        url = engine.url
        is_file = engine.dialect.name == "sqlite" and url.database not in (None, "", ":memory:")
        self._path: str | None = url.database if is_file else None
        self._conn: sqlite3.Connection | None = None
        self._wal: WalStamp | None = None
        self._wal_tried = False

    @property
    def available(self) -> bool:
        return self._path is not None

    def _rows(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        if self._path is None:
            return None
        try:
            # fetchall steps each statement to its end: no read transaction stays open
            return self._open(self._path).execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return None

    def _open(self, path: str) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                path, timeout=READ_TIMEOUT_S, isolation_level=None,
                check_same_thread=False, cached_statements=64,
            )
            conn.execute("PRAGMA query_only = 1")
            self._conn = conn
        return self._conn

    def stamp(self) -> bytes | None:
        """The database's change stamp now (:mod:`gateway.store.engine.walstamp`): equal
        stamps at two moments mean nothing was committed in between, by any process. None
        when it cannot be told (not WAL mode, no read made yet, a commit being written).
        Read it *before* the read it is to vouch for."""
        if self._wal is None:
            if self._wal_tried or self._path is None:
                return None
            self._wal_tried = True  # once per connection
            try:
                conn = self._open(self._path)
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    return None
                conn.execute("PRAGMA schema_version").fetchall()  # a read: its WAL open
                self._wal = WalStamp(self._path)  # mapped once this connection holds it
            except (sqlite3.Error, OSError):
                return None
        return self._wal.read()

    def job(self, job_id: str) -> tuple[Job | None] | None:
        """``(job or None,)``, or None when this reader cannot answer."""
        rows = self._rows(_GET_SQL, (job_id,))
        if rows is None:
            return None
        return (_from_sqlite(rows[0]) if rows else None,)

    def version(self, job_id: str) -> tuple[tuple[RowVersion, str, str] | None] | None:
        """``(((row_version, updated_at), tenant, arm) or None,)``, or None when this reader
        cannot answer."""
        rows = self._rows(_VERSION_SQL, (job_id,))
        if rows is None:
            return None
        return (((rows[0][0], rows[0][1]), rows[0][2], rows[0][3]) if rows else None,)

    def versions(self, job_ids: Sequence[str]) -> dict[str, tuple[RowVersion, str, str]] | None:
        """``{id: ((row_version, updated_at), tenant, arm)}`` of the jobs among ``job_ids``
        that exist, from one statement, or None when this reader cannot answer. The ids are
        padded to a power of two (the last one repeated), so a few statements, prepared
        once, serve every batch size."""
        size = 1 << (len(job_ids) - 1).bit_length()
        padded = [*job_ids, *[job_ids[-1]] * (size - len(job_ids))]
        rows = self._rows(_versions_sql(size), padded)
        if rows is None:
            return None
        return {row[0]: ((row[1], row[2]), row[3], row[4]) for row in rows}

    def current(self, job_id: str) -> tuple[tuple[Job, RowVersion] | None] | None:
        """``((job, its row version) or None,)`` from one read, or None when this reader
        cannot answer."""
        rows = self._rows(_CURRENT_SQL, (job_id,))
        if rows is None:
            return None
        if not rows:
            return (None,)
        *row, version, updated = rows[0]
        return ((_from_sqlite(row), (version, updated)),)

    def leased_job(self, job_id: str) -> tuple[Job, str | None, datetime | None] | None:
        """``(job, lease_owner, leased_until)``, or None when this reader cannot answer or
        there is no such job."""
        rows = self._rows(_LEASED_SQL, (job_id,))
        if not rows:
            return None
        *row, owner, until = rows[0]
        at = None if until is None else datetime.fromisoformat(until).replace(tzinfo=UTC)
        return _from_sqlite(row), owner, at

    def jobs(self, job_ids: Sequence[str]) -> list[Job] | None:
        """The jobs among ``job_ids`` that exist, or None when this reader cannot answer."""
        rows = self.rows(job_ids)
        return None if rows is None else [_from_sqlite(row) for row in rows.values()]

    def rows(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, ...]] | None:
        """The stored rows of the jobs among ``job_ids`` that exist, by id, as ``sqlite3``
        gives them (not converted: equal rows are equal jobs; :func:`job_of` converts),
        or None when this reader cannot answer."""
        marks = ", ".join("?" * len(job_ids))
        rows = self._rows(ROWS_SQL.format(marks), job_ids)
        return None if rows is None else {row[0]: tuple(row) for row in rows}

    def callback_token(self, job_id: str) -> tuple[tuple[str, str] | None] | None:
        """``((provider, token) or None,)``, or None when this reader cannot answer."""
        rows = self._rows(_CALLBACK_SQL, (job_id,))
        if rows is None:
            return None
        return ((rows[0][0], rows[0][1]) if rows else None,)

    def exists(self, sql: str, params: Sequence[Any]) -> bool | None:
        """Whether ``sql`` (a fixed query; datetimes in ``params`` are bound as the store
        writes them) returns a row, or None when this reader cannot answer."""
        rows = self._rows(sql, _bound(params))
        return None if rows is None else bool(rows)

    def time(self, sql: str, params: Sequence[Any]) -> tuple[datetime | None] | None:
        """``(the time in the first column of the first row, or None,)`` of ``sql`` (bound
        as :meth:`exists` binds), or None when this reader cannot answer."""
        rows = self._rows(sql, _bound(params))
        if rows is None:
            return None
        value = rows[0][0] if rows else None
        return (None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC),)

    def value(self, sql: str) -> tuple[Any] | None:
        """``(the first column of the first row of sql, or None,)`` (a fixed query, no
        parameters), or None when this reader cannot answer."""
        rows = self._rows(sql, ())
        return None if rows is None else (rows[0][0] if rows else None,)

    def routes_version(self) -> tuple[int] | None:
        """``(newest route change id or 0,)``, or None when this reader cannot answer."""
        rows = self._rows("SELECT max(id) FROM route_changes", ())
        return None if rows is None else (int(rows[0][0] or 0),)

    def page(self, sql: str, params: Sequence[Any]) -> list[Job] | None:
        rows = self._rows(sql, params)
        return None if rows is None else [_from_sqlite(row) for row in rows]

    def close(self) -> None:
        if self._wal is not None:  # unmapped while the connection still holds the file
            self._wal.close()
            self._wal = None
        self._wal_tried = False
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class JobReader:
    """GET and list reads for the API (see the module docstring).

    Parameters
    ----------
    store : JobStore
        The job store: it owns the process's :class:`SqliteReads` and serves what that
        cannot.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._fast: SqliteReads = store.fast_reads
        self._versions = SqliteVersions(self._fast)  # known and batched (store/versions.py)
        self._sqlite = self._versions.available
        engine = store.engine
        is_pg = engine.dialect.name == "postgresql"
        self._pg = RowReads(engine, _PG_VERSIONS_SQL) if is_pg else None
        self._pg_current = RowReads(engine, _PG_CURRENT_SQL) if is_pg else None

    async def close(self) -> None:
        """Give back the connections of PostgreSQL's batched reads (none on SQLite)."""
        for reads in (self._pg, self._pg_current):
            if reads is not None:
                await reads.close()

    async def get(self, job_id: str) -> Job:
        """The job with ``job_id``; ``NotFound`` if there is none."""
        return await self._store.get(job_id)

    def known_version(self, job_id: str) -> tuple[RowVersion, str, str] | None:
        """What :meth:`version` answers, when it is known without a read (SQLite: read
        since the last commit of any process, :mod:`gateway.store.versions`); else None
        (not known, or no such job: ask :meth:`version`). Not a coroutine: an in-flight
        GET of an unchanged prediction awaits nothing."""
        return self._versions.known(job_id) if self._sqlite else None

    async def version(self, job_id: str) -> tuple[RowVersion, str, str] | None:
        """``((row_version, updated_at), tenant, arm)`` of the job, None if there is none:
        one primary-key read of four small columns, batched with the other GETs waiting
        (on PostgreSQL one round trip); on SQLite none while nothing was committed since
        this job's last read (:mod:`gateway.store.versions`)."""
        if self._sqlite:
            known = self._versions.known(job_id)
            if known is not None:
                return known
            read = await self._versions.read(job_id)
            if read is not None:
                return read[0]
        batched = await self._pg.row(job_id) if self._pg is not None else None
        if batched is not None:
            row = batched[0]
            return None if row is None else ((row[1], row[2]), row[3], row[4])
        async with self._store.engine.read() as conn:
            row = (await conn.execute(GET_VERSION, {"job_id": job_id})).first()
        return None if row is None else ((row[0], row[1]), row[2], row[3])

    async def current(self, job_id: str) -> tuple[Job, RowVersion] | None:
        """The job and its row version, from one read; None if there is none. On
        PostgreSQL the read is batched with the other GETs waiting, one round trip
        (:mod:`gateway.store.engine.pgreads`), as :meth:`version` is."""
        fast = self._fast.current(job_id)
        if fast is not None:
            return fast[0]
        batched = await self._pg_current.row(job_id) if self._pg_current is not None else None
        if batched is not None:
            return None if batched[0] is None else job_and_version(batched[0])
        async with self._store.engine.read() as conn:
            row = (await conn.execute(GET_CURRENT, {"job_id": job_id})).first()
        return None if row is None else job_and_version(row)

    async def page(
        self,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        after: tuple[datetime, str] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        tenant: str | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs, newest first (as :meth:`JobStore.page`); only
        ``tenant``'s unless None."""
        if self._fast.available:
            sql, params = _page_sql(limit, before, after, created_after, created_before, tenant)
            found = self._fast.page(sql, params)
            if found is not None:
                return found[::-1] if after is not None else found
        return await self._store.page(
            limit=limit, before=before, after=after,
            created_after=created_after, created_before=created_before, tenant=tenant,
        )


@functools.cache
def _versions_sql(size: int) -> str:
    marks = ", ".join("?" * size)
    return ("SELECT id, row_version, updated_at, tenant, arm FROM jobs "  # noqa: S608
            f"WHERE id IN ({marks})")


def _page_sql(
    limit: int,
    before: tuple[datetime, str] | None,
    after: tuple[datetime, str] | None,
    created_after: datetime | None,
    created_before: datetime | None,
    tenant: str | None = None,
) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if tenant is not None:  # first: ix_jobs_tenant_created_at_id leads with it
        where.append("tenant = ?")
        params.append(tenant)
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
    where.append(_NOT_HIDDEN)  # shadows are never listed
    order = "created_at, id" if after is not None else "created_at DESC, id DESC"
    sql = f"SELECT {_LIST} FROM jobs"  # noqa: S608 (fixed fragments, bound values)
    if where:
        sql += " WHERE " + " AND ".join(where)
    return f"{sql} ORDER BY {order} LIMIT ?", [*params, limit]

