"""Per-job order of provider events: which events an earlier event of their job holds back.

Per job, :class:`gateway.store.events.ProviderEvents` applies events in the order they were
stored (by id; docs/lifecycle.md, "Order of a job's provider events"): an event is not
claimed, or taken from memory, while an earlier unprocessed event of its job is held by
another process or waits (for a retry's backoff, or for a claim). These are the queries
and checks that decide it, for a claim from the store (:data:`CLAIMABLE_SQL`,
:func:`free_of_earlier`) and for events handed over in memory (:func:`may_be_held_back`,
:func:`renew_fast`, :func:`renew_engine`, :func:`in_order`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gateway.store.engine.aio import Engine
from gateway.store.engine.fastwrite import SqliteConnection, in_list, sqlite_time
from gateway.store.reader import SqliteReads
from gateway.store.records import ProviderEvent
from gateway.store.schema import provider_events

__all__ = [
    "CLAIMABLE_SQL",
    "free_of_earlier",
    "in_order",
    "may_be_held_back",
    "renew_engine",
    "renew_fast",
]

# An event some claim would take now: unleased, and no earlier unprocessed event of its job
# is leased (held, or waiting for a retry). On PostgreSQL a claim also passes over one
# whose earlier event another claim has locked (ProviderEvents._claim_stored).
CLAIMABLE_SQL = (
    "SELECT 1 FROM provider_events AS p WHERE p.processed_at IS NULL"
    " AND (p.leased_until IS NULL OR p.leased_until < ?) AND NOT EXISTS ("
    "SELECT 1 FROM provider_events AS e WHERE e.job_id = p.job_id AND e.id < p.id"
    " AND e.processed_at IS NULL AND e.leased_until >= ?) LIMIT 1"
)
_EARLIER = provider_events.alias("earlier")
# Whether an unprocessed event of these jobs, before the newest of these events and not one
# of them, is not held here now: it may hold one of them back (ProviderEvents._take_handed).
_HELD_BACK_SQL = (
    "SELECT 1 FROM provider_events WHERE job_id IN ({jobs}) AND processed_at IS NULL"
    " AND id < ? AND id NOT IN ({ids})"
    " AND (lease_owner IS NULL OR lease_owner != ? OR leased_until < ?) LIMIT 1"
)
_RENEW_SQL = (
    "UPDATE provider_events SET leased_until = ? WHERE id IN ({ids}) AND lease_owner = ?"
    " AND processed_at IS NULL AND NOT EXISTS (SELECT 1 FROM provider_events AS earlier"
    " WHERE earlier.job_id = provider_events.job_id AND earlier.id < provider_events.id"
    " AND earlier.processed_at IS NULL AND earlier.id NOT IN ({ids}) AND ("
    "earlier.lease_owner IS NULL OR earlier.lease_owner != ? OR earlier.leased_until < ?))"
    " RETURNING id"
)


def free_of_earlier(candidates: Sequence[Any], others: Iterable[Any]) -> list[int]:
    """The ids of ``candidates`` (rows with ``id`` and ``job_id``, in id order) that no
    row of ``others`` (the unprocessed events of their jobs before the newest candidate,
    not candidates themselves) precedes in its job."""
    first_held: dict[str, int] = {}
    for other in others:
        first_held[other.job_id] = min(other.id, first_held.get(other.job_id, other.id))
    return [c.id for c in candidates if c.id < first_held.get(c.job_id, c.id + 1)]


def not_held_here(table: sa.FromClause, owner: str, now: datetime) -> sa.ColumnElement[bool]:
    """Rows of ``table`` (provider events) that ``owner`` does not hold at ``now``."""
    return sa.or_(
        table.c.lease_owner.is_(None),
        table.c.lease_owner != owner,
        table.c.leased_until < now,
    )


async def may_be_held_back(
    engine: Engine, reads: SqliteReads, taken: list[ProviderEvent], owner: str, now: datetime
) -> bool:
    """Whether an unprocessed event of the jobs of ``taken``, before the newest of them
    and not one of them, is not held by ``owner`` at ``now``: it may hold one of them back.
    A read (on SQLite by the lock-free reader), no transaction that writes."""
    ids = [e.id for e in taken]
    jobs_ = sorted({e.job_id for e in taken})
    sql = _HELD_BACK_SQL.format(jobs=in_list(len(jobs_)), ids=in_list(len(ids)))
    found = reads.exists(sql, (*jobs_, max(ids), *ids, owner, now))
    if found is not None:
        return found
    query = sa.select(provider_events.c.id).where(
        provider_events.c.job_id.in_(jobs_),
        provider_events.c.processed_at.is_(None),
        provider_events.c.id < max(ids),
        provider_events.c.id.not_in(ids),
        not_held_here(provider_events, owner, now),
    )
    async with engine.connect() as conn:
        return (await conn.execute(query.limit(1))).first() is not None


async def renew_engine(
    engine: Engine, held: sa.Update, ids: list[int], owner: str, now: datetime, until: datetime
) -> set[int]:
    """:func:`renew_fast` through the engine; ``held`` updates the rows of ``ids`` that
    ``owner`` holds."""
    held_back = sa.exists().where(
        _EARLIER.c.job_id == provider_events.c.job_id,
        _EARLIER.c.id < provider_events.c.id,
        _EARLIER.c.processed_at.is_(None),
        _EARLIER.c.id.not_in(ids),
        not_held_here(_EARLIER, owner, now),
    )
    statement = held.where(~held_back).values(leased_until=until).returning(provider_events.c.id)
    async with engine.begin() as conn:
        return set((await conn.execute(statement)).scalars())


def renew_fast(conn: SqliteConnection, ids: list[int], owner: str, now: datetime,
               until: datetime) -> set[int]:
    """Renew the leases ``owner`` holds on ``ids`` to ``until``, but not of an event that
    an earlier unprocessed event of its job (not among ``ids``) holds back: one not held
    by ``owner`` now. Returns the ids renewed (``sqlite3``,
    :mod:`gateway.store.engine.fastwrite`)."""
    sql = _RENEW_SQL.format(ids=in_list(len(ids)))
    params = (sqlite_time(until), *ids, owner, *ids, owner, sqlite_time(now))
    return {row[0] for row in conn.execute(sql, params)}


def in_order(taken: list[ProviderEvent], renewed: set[int]) -> list[ProviderEvent]:
    """The events of ``taken`` (in id order) that were renewed and follow no event of their
    job that was not: a job's events are applied in order, or wait together."""
    stopped: set[str] = set()
    kept = []
    for event in taken:
        if event.id in renewed and event.job_id not in stopped:
            kept.append(event)
        else:
            stopped.add(event.job_id)
    return kept
