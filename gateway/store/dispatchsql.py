"""The dispatcher's claim statements that take their conditions as arguments
(:mod:`gateway.store.dispatching` builds each once, with its parameters bound at
execution, and runs them through the engine or, on SQLite, through ``sqlite3``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gateway.store.records import ACTIVE as _ACTIVE
from gateway.store.records import UNSUBMITTED as _UNSUBMITTED
from gateway.store.schema import jobs

__all__ = ["SMALL_ROUND", "head", "in_flight", "ranked_candidates"]

SMALL_ROUND = 512
"""Waiting jobs a round orders without the window function, when all of them may go."""


def in_flight(
    provider: str | sa.BindParameter[str], now: datetime | sa.BindParameter[datetime],
    lost_is_idle: bool,
) -> sa.Select[Any]:
    """How many jobs ``provider`` has in flight: submitted and active, or leased for
    dispatch right now (a submit under way in some process). With ``lost_is_idle``
    (``Capabilities.lost_is_idle``), a job the provider said it no longer knows
    (``lost_at`` set: Cog's watchdog probe found it neither running nor queued,
    docs/cog.md §2) holds none of its slots while the gateway waits out ``lost_grace_s``
    for its late terminal webhook; without, "lost" may mean only that the process that
    asked cannot see it (an OpenAI-compatible call another process holds), and it
    counts."""
    submitted: sa.ColumnElement[bool] = jobs.c.submitted_at.is_not(None)
    if lost_is_idle:
        submitted = sa.and_(submitted, jobs.c.lost_at.is_(None))
    return (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(
            jobs.c.provider == provider,
            jobs.c.state.in_(_ACTIVE),
            sa.or_(
                submitted,
                sa.and_(jobs.c.state.in_(_UNSUBMITTED), jobs.c.leased_until >= now),
            ),
        )
    )


def head(unsubmitted: list[Any], now: datetime | sa.BindParameter[datetime]) -> sa.Select[Any]:
    """At most :data:`SMALL_ROUND` + 1 waiting jobs (``unsubmitted`` and due at ``now``),
    in no order: fewer than that are all of them. Due is ``next_attempt_at <= now`` or
    unset: one branch each, so each is a range of the ``(state, next_attempt_at)`` index
    (with the two together, SQLite read every unsubmitted row, jobs in flight at a
    polling provider included); no ``ORDER BY``, so a long queue is not sorted to learn
    that it is long."""
    columns = (jobs.c.id, jobs.c.owner, jobs.c.priority, jobs.c.created_at)
    both = sa.union_all(
        sa.select(*columns).where(*unsubmitted, jobs.c.next_attempt_at <= now),
        sa.select(*columns).where(*unsubmitted, jobs.c.next_attempt_at.is_(None)),
    ).subquery()
    return sa.select(both).limit(SMALL_ROUND + 1)


def ranked_candidates(waiting: list[Any]) -> sa.Select[Any]:
    """Statement 3 of :mod:`gateway.store.dispatching`: each API token's first
    ``d_per_owner`` jobs among those ``waiting`` (the round's conditions) by priority, then
    age (at most ``d_most`` in all), in the order the fair order reads them."""
    position = sa.func.row_number().over(
        partition_by=jobs.c.owner,
        order_by=(jobs.c.priority.desc(), jobs.c.created_at, jobs.c.id),
    )
    ranked = (
        sa.select(
            jobs.c.id, jobs.c.owner, jobs.c.priority, jobs.c.created_at,
            position.label("position"),
        )
        .where(*waiting)
        .subquery()
    )
    return (
        sa.select(ranked.c.id, ranked.c.owner, ranked.c.priority, ranked.c.created_at)
        .where(ranked.c.position <= sa.bindparam("d_per_owner", type_=sa.Integer))
        .order_by(ranked.c.priority.desc(), ranked.c.position, ranked.c.created_at)
        .limit(sa.bindparam("d_most", type_=sa.Integer))
    )
