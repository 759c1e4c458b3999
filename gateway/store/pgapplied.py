"""A provider event applied in the transaction that stores it, on PostgreSQL.

What :mod:`gateway.store.applied` does on a SQLite file, straight through asyncpg:
:meth:`gateway.store.events.ProviderEvents.add_applied` stores a verified webhook body
and, when nothing else of its job waits, applies it there, in one transaction on one
pooled connection checked out by the store's group-commit flusher (a lifecycle task:
never one of the shared connections that requests' reads hold,
gateway/store/engine/aio.py). Per event of the group, in job id order:

1. ``SELECT`` the job's row ``FOR UPDATE``: its columns, version, apply lease and next
   check. The lock conflicts with the ``KEY SHARE`` lock that storing any event of the
   job takes (its foreign key), so no other transaction stores an event of the job, or
   writes the job, until this one ends; one that had stored one is waited for first.
2. Without an apply lease held (:mod:`gateway.store.applying`), and with the row the one
   the decision was made from (``Applying.row``, when given), the job's columns are
   decided from it; then the event is ``INSERT`` ed already processed, unless an
   unprocessed event of the job exists (a new statement: it sees every commit made
   before the lock was granted), in which case that comes first and this one is stored
   for the processor as any other.
3. The job's columns (and its postponed check) are written by one ``UPDATE`` guarded as
   :mod:`gateway.store.writes` guards it (id and the state read), the row read back
   (``RETURNING``) only where a value may come back changed (JSON).

Five round trips (``BEGIN``, three statements, ``COMMIT``) instead of the event
processor's store, claim, read, write and mark transactions (docs/benchmarks.md). The
connection is checked out of the pool for each group (and for the read of a terminal
webhook's row beforehand, :meth:`PgApplied.row`) as the lifecycle's: no shared slot of
:class:`gateway.store.engine.aio.Engine` is taken for it, so no GET load delays a
webhook's apply; nothing is held between calls. When anything fails (the connection,
a deadlock the server broke, an error of this module) it is rolled back and dropped,
and the group is stored through the engine instead, as on SQLite, nothing of it
written here. A failed ``COMMIT`` may have committed: the engine's insert then finds
the events already stored (duplicates), which is what a retrying provider is told.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from sqlalchemy.util.concurrency import greenlet_spawn

from contracts.job import Job
from gateway.store import applying, jobrows
from gateway.store.applied import Applying, Checks, postponed
from gateway.store.engine.aio import Engine
from gateway.store.engine.fastwrite import bound
from gateway.store.ordering import predicted
from gateway.store.records import ACTIVE
from gateway.store.schema import jobs
from gateway.store.writes import stored_as_given

__all__ = ["ROW_SQL", "PgApplied"]

log = logging.getLogger(__name__)

_COLUMNS = ", ".join(jobrows.NAMES)
ROW_SQL = f"SELECT {_COLUMNS}, row_version FROM jobs WHERE id = $1"  # noqa: S608
"""``$1`` the id: a job's row with its version, as ``Applying.row`` holds it."""
_WIDTH = len(jobrows.NAMES) + 1  # a row of ROW_SQL
_LOCK_SQL = (f"SELECT {_COLUMNS}, row_version, lease_owner, leased_until, next_attempt_at"  # noqa: S608
             " FROM jobs WHERE id = $1 FOR UPDATE")
_INSERT_SQL = (
    "INSERT INTO provider_events (job_id, provider, event_key, body, received_at, lease_owner,"
    " leased_until) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    " ON CONFLICT (job_id, event_key) DO NOTHING RETURNING id"
)
# Stored processed only while no unprocessed event of the job exists (which comes first).
_INSERT_APPLIED_SQL = (
    "INSERT INTO provider_events (job_id, provider, event_key, body, received_at,"
    " processed_at) SELECT $1::varchar, $2::varchar, $3::varchar, $4::bytea,"
    " $5::timestamptz, $6::timestamptz WHERE NOT EXISTS (SELECT 1 FROM provider_events"
    " WHERE job_id = $1::varchar AND processed_at IS NULL)"
    " ON CONFLICT (job_id, event_key) DO NOTHING RETURNING id"
)
_POSTPONE_SQL = (  # noqa: S608 (fixed state names)
    "UPDATE jobs SET next_attempt_at = $1 WHERE id = $2 AND state IN ({})"
    " AND submitted_at IS NOT NULL AND next_attempt_at < $1"
).format(", ".join(f"'{s}'" for s in ACTIVE))
_ACTIVE = frozenset(ACTIVE)


class PgApplied:
    """Stores a group of events, applying those it can (see the module docstring).

    Parameters
    ----------
    engine : Engine
        The process's engine; on anything but PostgreSQL :attr:`available` is False and
        every call answers None.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.available = engine.dialect.name == "postgresql"
        """Whether :meth:`add` may run here at all (PostgreSQL)."""
        self._dispatch = engine.sync_engine.dispatch
        self._closed = False

    async def row(self, job_id: str) -> tuple[tuple[Any, ...], Job] | None:
        """The job's row as :data:`ROW_SQL` reads it and its job, for ``Applying.row``;
        None when there is no such job or it could not be read. Read on a connection of
        the lifecycle's (module docstring): it never waits behind GETs for a shared one."""
        if not self.available or self._closed:
            return None
        try:
            async with self._connection() as conn:
                found = await conn.fetchrow(ROW_SQL, job_id)
        except Exception:  # noqa: BLE001 (not read: the processor applies the event)
            return None
        if found is None:
            return None
        row = tuple(found)
        return row, jobrows.pg_job(row[:-1])

    async def add(
        self, rows: list[dict[str, Any]], checks: Checks, applyings: list[Applying | None],
        applied: dict[tuple[str, str], tuple[Job, Job | None]], now: datetime,
    ) -> dict[tuple[str, str], int] | None:
        """:func:`gateway.store.applied.add_fast` on PostgreSQL: ``{(job id, event key):
        event id}`` of the new events, each applied one's (job before, job written or
        None) in ``applied``; None when the group could not be stored here (nothing of it
        was: the caller stores it through the engine). A listener on the engine's
        statements (tracing, the tests' fault injection) sends every group there."""
        watched = self._dispatch.before_cursor_execute or self._dispatch.after_cursor_execute
        if not self.available or self._closed or watched:
            return None
        try:
            async with self._connection() as conn, conn.transaction():
                return await _add(conn, rows, checks, applyings, applied,
                                  self._engine.dialect, now)
        except Exception as exc:  # noqa: BLE001 (rolled back: the engine stores the group)
            log.info("provider_events_applied_fallback", extra={"error": repr(exc)})
            applied.clear()
            return None
        except BaseException:
            applied.clear()
            raise

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        """The driver's connection of one of the pool's, checked out for one transaction
        or read (no shared slot taken: the lifecycle's side of the pool); given back,
        or dropped when anything raised (its state is not known then)."""
        pooled = await greenlet_spawn(self._engine.sync_engine.raw_connection)
        try:
            yield pooled.driver_connection
        except BaseException:
            with contextlib.suppress(Exception):
                await greenlet_spawn(pooled.invalidate)
            raise
        finally:
            with contextlib.suppress(Exception):
                await greenlet_spawn(pooled.close)

    async def close(self) -> None:
        """Later groups go through the engine (nothing is held between calls)."""
        self._closed = True


async def _add(
    conn: Any, rows: list[dict[str, Any]], checks: Checks, applyings: list[Applying | None],
    applied: dict[tuple[str, str], tuple[Job, Job | None]], dialect: Any, now: datetime,
) -> dict[tuple[str, str], int]:
    stored: dict[tuple[str, str], int] = {}
    for r, how in zip(rows, applyings, strict=True):
        key = (r["job_id"], r["event_key"])
        if how is not None:
            done = await _apply(conn, r, how, checks.get(key), dialect, now)
            if done is not None:
                event_id, before, written = done
                stored[key] = event_id
                applied[key] = (before, written)
                continue
        found = await conn.fetchval(
            _INSERT_SQL, r["job_id"], r["provider"], r["event_key"], r["body"],
            r["received_at"], r["lease_owner"], r["leased_until"])
        if found is not None:
            stored[key] = found
    params = postponed(checks, {k: i for k, i in stored.items() if k not in applied})
    if params:
        await conn.executemany(_POSTPONE_SQL, [(p["p_until"], p["p_id"]) for p in params])
    return stored


async def _apply(
    conn: Any, row: dict[str, Any], how: Applying, check_after: datetime | None,
    dialect: Any, now: datetime,
) -> tuple[int, Job, Job | None] | None:
    """Store ``row``'s event processed and write what ``how`` decides for its job:
    ``(event id, the job before, the job written or None)``; None (nothing written) when
    the event is the processor's, or a duplicate (the caller's plain insert finds it)."""
    job_id = row["job_id"]
    found = await conn.fetchrow(_LOCK_SQL, job_id)
    if found is None:
        return None
    values_row = tuple(found)
    current = values_row[:_WIDTH]
    lease_owner, leased_until, next_at = values_row[_WIDTH:]
    if applying.held_until(lease_owner, leased_until, now) is not None:
        return None
    if how.row is not None and how.job is not None:
        if current != how.row:
            return None  # changed since decided
        before = how.job
    else:
        before = jobrows.pg_job(current[:-1])
    values = how.columns(before)
    if values is None:
        return None
    event_id = await conn.fetchval(
        _INSERT_APPLIED_SQL, job_id, row["provider"], row["event_key"], how.kept,
        row["received_at"], now)
    if event_id is None:
        return None  # an unprocessed event of the job comes first (or a duplicate)
    postpone = (check_after is not None and before.state.value in _ACTIVE
                and before.submitted_at is not None and next_at is not None
                and next_at < check_after)
    merged = {"next_attempt_at": check_after, **values} if postpone else values
    written = await _write(conn, before, merged, dialect)
    return event_id, before, written if values else None


async def _write(conn: Any, before: Job, values: dict[str, Any], dialect: Any) -> Job | None:
    """The guarded ``UPDATE`` with ``values`` (none: no write); the job as written."""
    if not values:
        return None
    names = tuple(sorted(values))
    params = [*bound(jobs, dialect, names, values), before.id, before.state.value]
    if stored_as_given(values):
        await conn.execute(_update_sql(names, returning=False), *params)
        return predicted(before, values)
    back = await conn.fetchrow(_update_sql(names, returning=True), *params)
    return None if back is None else jobrows.pg_job(tuple(back))


@functools.lru_cache(maxsize=64)
def _update_sql(names: tuple[str, ...], *, returning: bool) -> str:
    sets = ", ".join(f"{name} = ${n}" for n, name in enumerate(names, start=1))
    where = f" WHERE id = ${len(names) + 1} AND state = ${len(names) + 2}"
    tail = f" RETURNING {_COLUMNS}" if returning else ""
    return f"UPDATE jobs SET {sets}{where}{tail}"  # noqa: S608 (column names)
