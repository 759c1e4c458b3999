"""A provider event applied in the transaction that stores it (SQLite's ``sqlite3`` path).

:meth:`gateway.store.events.ProviderEvents.add_applied` stores a verified webhook body
and, when nothing else of its job waits (no unprocessed event of the job, which would
come first; no apply lease, :mod:`gateway.store.applying`), applies it there: the job's
columns decided from its row as that transaction reads it (:class:`Applying`), written
with the same guarded ``UPDATE`` as :mod:`gateway.store.writes`, and the event stored
already processed, with its kept body. One ``BEGIN IMMEDIATE`` transaction instead of
the event processor's three (store, apply, mark processed) and its round
(docs/benchmarks.md, "Provider webhooks applied as they are stored"). Whatever this path
does not take is stored for the processor as before, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from contracts.job import Job
from gateway.store import applying
from gateway.store.engine import db
from gateway.store.engine.aio import Engine
from gateway.store.engine.fastwrite import SqliteConnection, bound, sqlite_time
from gateway.store.ordering import predicted
from gateway.store.reader import ROWS_SQL, SqliteReads, job_of
from gateway.store.records import ACTIVE
from gateway.store.schema import jobs, provider_events
from gateway.store.writes import stored_as_given, update_sql

__all__ = ["Applying", "Checks", "Stored", "add_engine", "add_fast", "apply_fast", "postponed",
           "sqlite_row"]

Checks = dict[tuple[str, str], "datetime | None"]
"""(job id, event key) -> when the job's next poll or probe is postponed to."""


@dataclass(frozen=True)
class Applying:
    """How to apply a body in the transaction that stores it
    (:meth:`ProviderEvents.add_applied`).

    ``decide(job)``, given the job as that transaction reads it, returns the job columns
    to write (name -> value, as :func:`gateway.store.ordering.progress_columns`
    makes them; empty: nothing to write, the event applied all the same), or None when
    the event is not for this path (the processor applies it). It runs inside the
    transaction: quick, and raising nothing it means (an exception is taken as None).
    ``kept`` is the body stored once applied (:func:`adapters.errortext.kept_body`).
    With ``row`` (the job's row as :meth:`ProviderEvents.job_row` read it: on SQLite as
    :meth:`gateway.store.reader.SqliteReads.rows` reads it, on PostgreSQL with its
    version, :data:`gateway.store.pgapplied.ROW_SQL`), and ``job``, that row's job), what
    was decided from it beforehand holds only while the row is unchanged: otherwise the
    event is the processor's.
    """

    decide: Callable[[Job], dict[str, Any] | None]
    kept: bytes
    row: tuple[Any, ...] | None = None
    job: Job | None = None

    def columns(self, job: Job) -> dict[str, Any] | None:
        """``decide(job)``, None when it raised (the processor applies the event then,
        and reports what it raises)."""
        try:
            return self.decide(job)
        except Exception:  # noqa: BLE001 (the processor's to report)
            return None


@dataclass(frozen=True)
class Stored:
    """What :meth:`ProviderEvents.add_applied` did with a body: ``new`` False for a
    duplicate of the job's (nothing done); ``applied`` when it was applied as it was
    stored, ``job`` then the job as written (None when its apply wrote nothing);
    ``event_id`` the stored event's."""

    new: bool
    applied: bool = False
    job: Job | None = None
    event_id: int | None = None


POSTPONE_SQL = (  # noqa: S608 (fixed state names)
    "UPDATE jobs SET next_attempt_at = ? WHERE id = ? AND state IN ({})"
    " AND submitted_at IS NOT NULL AND next_attempt_at < ?"
).format(", ".join(f"'{s}'" for s in ACTIVE))
_INSERT_SQL = (
    "INSERT INTO provider_events (job_id, provider, event_key, body, received_at, lease_owner,"
    " leased_until) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (job_id, event_key) DO NOTHING RETURNING id"
)
_INSERT_APPLIED_SQL = (
    "INSERT INTO provider_events (job_id, provider, event_key, body, received_at,"
    " processed_at) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (job_id, event_key) DO NOTHING RETURNING id"
)
# The job's apply lease, and whether an event of the job is not processed yet.
_APPLIABLE_SQL = (
    "SELECT lease_owner, leased_until, EXISTS (SELECT 1 FROM provider_events"
    " WHERE job_id = ? AND processed_at IS NULL) FROM jobs WHERE id = ?"
)
_ROW_SQL = ROWS_SQL.format("?")
_ACTIVE_STATE = sa.or_(*(jobs.c.state == sa.literal_column(f"'{s}'") for s in ACTIVE))
_UNTIL = sa.bindparam("p_until", type_=jobs.c.next_attempt_at.type)
_POSTPONE = (
    jobs.update()
    .where(
        jobs.c.id == sa.bindparam("p_id"),
        _ACTIVE_STATE,  # constants: an executemany takes no expanding IN
        jobs.c.submitted_at.is_not(None),
        jobs.c.next_attempt_at < _UNTIL,
    )
    .values(next_attempt_at=_UNTIL)
)


def apply_fast(
    conn: SqliteConnection, row: dict[str, Any], how: Applying, check_after: datetime | None,
    dialect: sa.Dialect, now: datetime,
) -> tuple[int | None, Job, Job | None] | None:
    """Store ``row``'s event processed and write what ``how`` decides for its job, inside
    the transaction of :mod:`gateway.store.events` that stores it: ``(event id or None
    for a duplicate, the job before, the job written or None)``, or None (nothing
    written) when the event is not applied here: its job is missing, under an apply
    lease, has an unprocessed event (which comes first), or ``how`` says no."""
    job_id = row["job_id"]
    before = _next_in_order(conn, job_id, how, now)
    if before is None:
        return None
    values = how.columns(before)
    if values is None:
        return None
    inserted = conn.execute(_INSERT_APPLIED_SQL, (
        job_id, row["provider"], row["event_key"], how.kept, sqlite_time(row["received_at"]),
        sqlite_time(now),
    )).fetchone()
    if inserted is None:
        return None, before, None  # a duplicate: nothing applied again
    return inserted[0], before, _write(conn, before, values, check_after, dialect)


def _next_in_order(conn: SqliteConnection, job_id: str, how: Applying, now: datetime
                   ) -> Job | None:
    """The job, when an event of it may be applied now: it exists, no event of it is
    unprocessed, no apply lease is held on it, and its row is ``how.row`` if given."""
    state = conn.execute(_APPLIABLE_SQL, (job_id, job_id)).fetchone()
    if state is None or state[2]:
        return None
    lease_owner, leased_until, _ = state
    if leased_until is not None and applying.held_until(
        lease_owner, datetime.fromisoformat(leased_until).replace(tzinfo=UTC), now
    ) is not None:
        return None
    found = conn.execute(_ROW_SQL, (job_id,)).fetchone()
    if found is None:
        return None
    if how.row is None or how.job is None:
        return job_of(found)
    return how.job if tuple(found) == how.row else None  # else changed since decided


def _write(conn: SqliteConnection, before: Job, values: dict[str, Any],
           check_after: datetime | None, dialect: sa.Dialect) -> Job | None:
    """The guarded ``UPDATE`` of :mod:`gateway.store.writes` with ``values`` (none: no
    write), then the postponed check; the job as written (None when nothing of it was),
    read back only where a value may come back changed (JSON)."""
    job_id = before.id
    postponed_to = None
    if check_after is not None:
        at = sqlite_time(check_after)
        if conn.execute(POSTPONE_SQL, (at, job_id, at)).rowcount > 0:
            postponed_to = check_after
    if not values:
        return None
    names = tuple(sorted(values))
    conn.execute(update_sql(names),
                 [*bound(jobs, dialect, names, values), job_id, before.state.value])
    if postponed_to is not None:
        values = {"next_attempt_at": postponed_to, **values}
    if stored_as_given(values):
        return predicted(before, values)
    back = conn.execute(_ROW_SQL, (job_id,)).fetchone()
    return None if back is None else job_of(back)


def sqlite_row(reads: SqliteReads, job_id: str) -> tuple[tuple[Any, ...], Job] | None:
    """The job's row as ``Applying.row`` holds it on SQLite, with its job; None when there
    is no such job or ``reads`` cannot answer."""
    rows = reads.rows([job_id])
    row = None if rows is None else rows.get(job_id)
    return None if row is None else (row, job_of(row))


def postponed(checks: Checks, stored: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The postponed checks of the jobs whose events were new (``stored``): one update per
    job, in id order. Every process locks jobs rows in that order, so two processes
    postponing the same jobs wait for each other instead of deadlocking."""
    until: dict[str, datetime] = {}
    for (job_id, event_key), at in checks.items():
        if at is not None and (job_id, event_key) in stored:
            until[job_id] = max(at, until.get(job_id, at))
    return [{"p_id": job_id, "p_until": until[job_id]} for job_id in sorted(until)]


def add_fast(
    conn: SqliteConnection, rows: list[dict[str, Any]], checks: Checks,
    applyings: list[Applying | None], applied: dict[tuple[str, str], tuple[Job, Job | None]],
    dialect: sa.Dialect, now: datetime,
) -> dict[tuple[str, str], int]:
    """:func:`add_engine` on ``sqlite3`` (:mod:`gateway.store.engine.fastwrite`),
    applying those it can (``applyings``, one per row) as they are stored: each applied
    one's (job before, job written or None) goes into ``applied``."""
    stored: dict[tuple[str, str], int] = {}
    for r, how in zip(rows, applyings, strict=True):
        key = (r["job_id"], r["event_key"])
        if how is not None:
            done = apply_fast(conn, r, how, checks.get(key), dialect, now)
            if done is not None:
                event_id, before, written = done
                if event_id is not None:
                    stored[key] = event_id
                    applied[key] = (before, written)
                continue
        found = conn.execute(_INSERT_SQL, (
            r["job_id"], r["provider"], r["event_key"], r["body"], sqlite_time(r["received_at"]),
            r["lease_owner"], sqlite_time(r["leased_until"]),
        )).fetchone()
        if found is not None:
            stored[key] = found[0]
    conn.executemany(POSTPONE_SQL, [
        (sqlite_time(p["p_until"]), p["p_id"], sqlite_time(p["p_until"]))
        for p in postponed(checks, {k: i for k, i in stored.items() if k not in applied})
    ])
    return stored


async def add_engine(engine: Engine, rows: list[dict[str, Any]], checks: Checks
                     ) -> dict[tuple[str, str], int]:
    """Store ``rows`` (new events, for the processor) through the engine, with the
    postponed checks of their jobs: ``{(job id, event key): event id}`` of the new ones."""
    async with engine.begin() as conn:
        insert = db.dialect_insert(conn)
        statement = (
            insert(provider_events)
            .on_conflict_do_nothing(index_elements=["job_id", "event_key"])
            .returning(
                provider_events.c.id, provider_events.c.job_id, provider_events.c.event_key
            )
        )
        stored = {(r.job_id, r.event_key): r.id for r in await conn.execute(statement, rows)}
        params = postponed(checks, stored)
        if params:
            await conn.execute(_POSTPONE, params)
    return stored
