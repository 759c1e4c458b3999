"""Shadow jobs in the store: budget counts, finished pairs, their files and comparisons.

A shadow is a job row of its own (``arm = 'shadow'``) whose ``shadow_of`` names its
primary; it is written in the primary's insert transaction (:meth:`gateway.store.JobStore
.create`). This module reads what the dispatcher needs to keep a route's shadows within
budget and what the report needs to compare pairs, and keeps each pair's comparison once
made (table ``shadow_comparisons``, docs/shadow.md "How the gateway uses it").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from contracts.job import ACTIVE_STATES, TERMINAL_STATES, Job, JobState
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.rollout.spec import HIDDEN_ARMS
from gateway.store import lease
from gateway.store.dispatching import MAYBE_SUBMITTED
from gateway.store.engine import db
from gateway.store.engine.aio import Engine
from gateway.store.schema import assets, jobs, shadow_comparisons

__all__ = ["FileRow", "ShadowPair", "ShadowStore", "StoredComparison"]

_ACTIVE = [s.value for s in ACTIVE_STATES]
_TERMINAL = [s.value for s in TERMINAL_STATES]


@dataclass(frozen=True)
class FileRow:
    """One output file a job's outputs were copied to (``key`` in owned storage)."""

    key: str
    sha256: str
    size_bytes: int
    content_type: str


@dataclass(frozen=True)
class ShadowPair:
    """A finished primary (control) and its finished shadow, with their files; ``kind``
    is the shadow's arm: ``shadow`` (the candidate) or ``baseline`` (the control again)."""

    control: Job
    candidate: Job
    control_files: tuple[FileRow, ...]
    candidate_files: tuple[FileRow, ...]

    @property
    def kind(self) -> str:
        return self.candidate.arm


@dataclass(frozen=True)
class StoredComparison:
    """One pair's comparison as kept: the shadow job's id, its primary's, the route, the
    kind (``shadow`` or ``baseline``), the shadow's creation time and the JSON of
    :class:`shadow.compare.PairComparison`, with the replay that made it (None: a live
    shadow's)."""

    shadow_id: str
    primary_id: str
    route: str
    kind: str
    created_at: datetime
    comparison: dict[str, Any]
    replay_id: str | None = None  # the replay that made the pair (None: live traffic)


def _unsubmitted_shadow() -> list[Any]:
    return [
        jobs.c.arm.in_(HIDDEN_ARMS),
        jobs.c.state.in_([JobState.CREATING.value, JobState.QUEUED.value]),
        jobs.c.submitted_at.is_(None),
    ]


def _known_unsent() -> Any:
    """Not a submit that may have reached the provider (``MAYBE_SUBMITTED``)."""
    return sa.or_(jobs.c.raw_status.is_(None), jobs.c.raw_status.not_in(MAYBE_SUBMITTED))


def _made_by(column: Any, replay_id: str | None) -> Any:
    """Live traffic's rows (``replay_id`` None) or one replay's (docs/cutover-day.md)."""
    return column.is_(None) if replay_id is None else column == replay_id


def _job(row: Any) -> Job:
    return Job.model_validate(dict(row._mapping))


class ShadowStore:
    """Reads of shadow jobs (see the module docstring)."""

    def __init__(self, engine: Engine, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self._clock = clock

    async def budget_use(self, route: str) -> tuple[int, int]:
        """``(running, started in the last hour)``: the route's submitted shadows."""
        hour_ago = self._clock.now() - timedelta(hours=1)
        shadows = sa.and_(jobs.c.route == route, jobs.c.arm.in_(HIDDEN_ARMS),
                          jobs.c.submitted_at.is_not(None))
        running = sa.select(sa.func.count()).where(shadows, jobs.c.state.in_(_ACTIVE))
        recent = sa.select(sa.func.count()).where(shadows, jobs.c.submitted_at >= hour_ago)
        async with self._engine.connect() as conn:
            return (
                int((await conn.execute(running)).scalar_one()),
                int((await conn.execute(recent)).scalar_one()),
            )

    async def waiting(self, route: str, created_before: datetime, limit: int) -> list[Job]:
        """``route``'s shadows created at or before ``created_before`` still waiting at the
        gateway, oldest first: never submitted, not leased for a submit, and not a submit
        that may have reached the provider (:data:`gateway.store.dispatching.MAYBE_SUBMITTED`)."""
        query = (
            sa.select(jobs)
            .where(*_unsubmitted_shadow(), _known_unsent(), lease.unleased(jobs, self._clock.now()),
                   jobs.c.route == route, jobs.c.created_at <= created_before)
            .order_by(jobs.c.created_at)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_job(r) for r in (await conn.execute(query)).all()]

    async def oldest_waiting(self) -> dict[str, datetime]:
        """Route -> creation time of its oldest shadow still waiting at the gateway, as
        :meth:`waiting` counts them, or being submitted right now (a busy answer leaves
        it waiting), so the reaper can wake when its wait runs out."""
        now = self._clock.now()
        query = (
            sa.select(jobs.c.route, sa.func.min(jobs.c.created_at))
            .where(*_unsubmitted_shadow(), sa.or_(_known_unsent(), jobs.c.leased_until > now))
            .group_by(jobs.c.route)
        )
        async with self._engine.connect() as conn:
            return {route: oldest for route, oldest in (await conn.execute(query)).all()}

    async def tally(
        self, route: str, since: datetime | None = None, *, replay_id: str | None = None
    ) -> tuple[int, dict[tuple[JobState, str | None], int]]:
        """``(shadowed, ended unsent)`` of ``route`` since ``since`` (None: all kept):
        shadows that reached their provider, and, by final state and stored error, those
        that ended without (skipped by the policy, dropped by the budget or the wait,
        refused at submit, or canceled with their primary: no skip,
        :func:`gateway.rollout.shadowgate.skip_of` tells them apart); live traffic's, or
        replay ``replay_id``'s."""
        where = [jobs.c.route == route, jobs.c.arm.in_(HIDDEN_ARMS),
                 _made_by(jobs.c.replay_id, replay_id)]
        if since is not None:
            where.append(jobs.c.created_at >= since)
        shadowed = sa.select(sa.func.count()).where(*where, jobs.c.submitted_at.is_not(None))
        skipped = (
            sa.select(jobs.c.state, jobs.c.error, sa.func.count())
            .where(*where, jobs.c.submitted_at.is_(None), jobs.c.state.in_(_TERMINAL))
            .group_by(jobs.c.state, jobs.c.error)
        )
        async with self._engine.connect() as conn:
            made = int((await conn.execute(shadowed)).scalar_one())
            ended = (await conn.execute(skipped)).all()
        return made, {(JobState(state), error): int(n) for state, error, n in ended}

    async def primary_input(self, job_id: str) -> dict[str, Any] | None:
        """The stored input of primary ``job_id``: the one copy its shadows refer to
        (docs/shadow.md, "Inputs by reference"); None when gone or removed by retention."""
        query = sa.select(jobs.c.input, jobs.c.data_removed).where(jobs.c.id == job_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None or row.data_removed else row.input

    async def shadows_of(self, job_id: str) -> list[Job]:
        """The shadow jobs of primary ``job_id``."""
        query = sa.select(jobs).where(jobs.c.shadow_of == job_id).order_by(jobs.c.id)
        async with self._engine.connect() as conn:
            return [_job(r) for r in (await conn.execute(query)).all()]

    async def pairs(
        self, route: str, since: datetime | None = None, limit: int = 500, *, kind: str,
        uncompared: bool = False, replay_id: str | None = None,
    ) -> list[ShadowPair]:
        """The route's newest ``limit`` pairs of ``kind`` (``shadow``: with the candidate,
        ``baseline``: the control twice) where both ends are terminal and still hold their
        data, and the shadow reached its provider (one dropped by the budget, or expired
        while waiting, says nothing about the provider: it would read as a status break);
        with ``uncompared``, only those without a stored comparison. Live traffic's pairs,
        or (``replay_id``) one replay's, whose primary is the recorded prediction."""
        primary = jobs.alias("primary")
        query = (
            sa.select(jobs.c.id, jobs.c.shadow_of)
            .join(primary, primary.c.id == jobs.c.shadow_of)
            .where(
                jobs.c.route == route,
                jobs.c.arm == kind,
                _made_by(jobs.c.replay_id, replay_id),
                jobs.c.state.in_(_TERMINAL),
                primary.c.state.in_(_TERMINAL),
                jobs.c.submitted_at.is_not(None),
                jobs.c.data_removed.is_(False),
                primary.c.data_removed.is_(False),
            )
            .order_by(jobs.c.created_at.desc())
            .limit(limit)
        )
        if uncompared:
            stored = shadow_comparisons.c.shadow_id
            query = query.outerjoin(shadow_comparisons, stored == jobs.c.id).where(
                stored.is_(None)
            )
        if since is not None:
            query = query.where(jobs.c.created_at >= since)
        async with self._engine.connect() as conn:
            links = (await conn.execute(query)).all()
            ids = [r.id for r in links] + [r.shadow_of for r in links]
            found = {}
            files: defaultdict[str, list[FileRow]] = defaultdict(list)
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                for row in await conn.execute(sa.select(jobs).where(jobs.c.id.in_(chunk))):
                    found[row.id] = _job(row)
                owned = sa.select(assets).where(assets.c.job_id.in_(chunk)).order_by(assets.c.key)
                for row in await conn.execute(owned):
                    files[row.job_id].append(
                        FileRow(row.key, row.sha256, row.size_bytes, row.content_type)
                    )
        return [
            ShadowPair(found[r.shadow_of], found[r.id], tuple(files[r.shadow_of]),
                       tuple(files[r.id]))
            for r in links
        ]

    async def save_comparisons(self, found: list[StoredComparison]) -> None:
        """Keep comparisons; a pair already kept (another process compared it too) keeps
        its first one."""
        if not found:
            return
        now = self._clock.now()
        rows = [{"shadow_id": c.shadow_id, "primary_id": c.primary_id, "route": c.route,
                 "kind": c.kind, "created_at": c.created_at, "compared_at": now,
                 "comparison": c.comparison, "replay_id": c.replay_id} for c in found]
        async with self._engine.begin() as conn:
            insert = db.dialect_insert(conn)
            await conn.execute(
                insert(shadow_comparisons).on_conflict_do_nothing(
                    index_elements=[shadow_comparisons.c.shadow_id]
                ),
                rows,
            )

    async def comparisons(
        self, route: str, since: datetime | None = None, limit: int = 500, *, kind: str,
        replay_id: str | None = None,
    ) -> list[StoredComparison]:
        """The route's newest ``limit`` kept comparisons of ``kind``, newest first (index
        ``ix_shadow_comparisons_route_kind_created_at``): live traffic's, or replay
        ``replay_id``'s."""
        table = shadow_comparisons
        query = (
            sa.select(table)
            .where(table.c.route == route, table.c.kind == kind,
                   _made_by(table.c.replay_id, replay_id))
            .order_by(table.c.created_at.desc(), table.c.shadow_id.desc())
            .limit(limit)
        )
        if since is not None:
            query = query.where(table.c.created_at >= since)
        async with self._engine.connect() as conn:
            found = (await conn.execute(query)).all()
        return [StoredComparison(r.shadow_id, r.primary_id, r.route, r.kind, r.created_at,
                                 r.comparison, r.replay_id) for r in found]
