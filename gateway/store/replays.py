"""Replays of a route's recorded inputs in the store (docs/cutover-day.md, "Replaying
recorded inputs").

A replay is one ``shadow_replays`` row: the route, the window of recorded inputs
(``since`` .. ``until``, its start), at most ``max_inputs`` of them, the share also sent
to the control again for the baseline, its state (``running``, ``stopped``,
``finished``) and its counts. The inputs are the route's finished control predictions
(completed or failed, data kept), its own and those imported or adopted from the legacy
provider (stored under the model's name, without a version:
:func:`gateway.legacy.adoption.adopted_row`), newest first. The gateway process holding
the row's lease hands them out in budget-sized steps (:meth:`ReplayStore.hand_out`):
in one transaction the replay's shadow jobs are inserted (``jobs.replay_id``; the unique
index ``ix_jobs_replay_id_shadow_of_arm`` keeps one job per input and arm, so a resumed
or taken-over replay never sends an input twice) and the row's cursor moves past them,
only while the row is still running and still leased by that process.

Raises (every method that changes a row): :class:`contracts.errors.NotFound` for an
unknown replay, :class:`contracts.errors.Conflict` (409) for a change its state does not
allow (a second running replay of a route, a stop of one not running, a resume of one
not stopped); nothing is changed then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from contracts.errors import Conflict, NotFound
from contracts.job import JobState
from gateway import ids
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store import lease
from gateway.store.engine import db
from gateway.store.engine.aio import Connection, Engine
from gateway.store.records import TERMINAL, UNSUBMITTED, NewJob, new_row
from gateway.store.schema import jobs, routes, shadow_replays

__all__ = ["STATES", "RecordedInput", "Replay", "ReplayStore"]

STATES = ("running", "stopped", "finished")
_RECORDED_STATES = [JobState.COMPLETED.value, JobState.FAILED.value]


@dataclass(frozen=True)
class Replay:
    """One replay as stored, with the progress of its jobs (``done``: terminal ones,
    ``submitted``: those that reached their provider, ``dropped``: ended without)."""

    id: str
    route: str
    tenant: str | None
    since: datetime | None
    until: datetime
    max_inputs: int | None
    baseline_percent: float
    state: str
    total: int
    sent: int
    skipped: int
    jobs: int
    who: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cursor: tuple[datetime, str] | None = None
    done: int = 0
    dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        """The admin API's form (docs/cutover-day.md): ids, times as ISO 8601, counts,
        and ``progress`` from 0 to 1 (inputs handed out and their jobs finished)."""
        return {
            "id": self.id, "route": self.route, "tenant": self.tenant, "state": self.state,
            "since": _iso(self.since), "until": _iso(self.until), "limit": self.max_inputs,
            "baseline_percent": self.baseline_percent, "who": self.who,
            "inputs": {"total": self.total, "sent": self.sent - self.skipped,
                       "skipped": self.skipped, "left": max(self.total - self.sent, 0)},
            "jobs": {"created": self.jobs, "done": self.done, "dropped": self.dropped},
            "progress": self.progress,
            "created_at": _iso(self.created_at), "updated_at": _iso(self.updated_at),
            "finished_at": _iso(self.finished_at),
        }

    @property
    def progress(self) -> float:
        """Inputs handed out, weighted by their jobs finished: 1.0 once every input was
        handed out and every job it made is terminal."""
        if self.total == 0:
            return 1.0
        pending = self.jobs - self.done
        share = (self.sent - (pending / 2 if self.jobs else 0)) / self.total
        return round(min(max(share, 0.0), 1.0), 4)


@dataclass(frozen=True)
class RecordedInput:
    """A recorded prediction a replay may send again: its id, model, version, input,
    tenant and creation time."""

    id: str
    model: str
    version: str
    deployment: str | None
    input: dict[str, Any]
    tenant: str
    created_at: datetime


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _replay(row: Any, done: int = 0, dropped: int = 0) -> Replay:
    cursor = (row.cursor_at, row.cursor_id) if row.cursor_id is not None else None
    return Replay(
        id=row.id, route=row.route, tenant=row.tenant, since=row.since, until=row.until,
        max_inputs=row.max_inputs, baseline_percent=row.baseline_percent, state=row.state,
        total=row.total, sent=row.sent, skipped=row.skipped, jobs=row.jobs, who=row.who,
        created_at=row.created_at, updated_at=row.updated_at, finished_at=row.finished_at,
        cursor=cursor, done=done, dropped=dropped,
    )


def recorded_where(route_keys: tuple[str, ...], *, since: datetime | None, until: datetime,
                   tenant: str | None) -> list[Any]:
    """The recorded inputs of a route whose names are ``route_keys`` (its own name, and
    its model's for imported predictions) created in ``[since, until)``."""
    where = [
        jobs.c.route.in_(route_keys), jobs.c.arm == "control",
        jobs.c.state.in_(_RECORDED_STATES), jobs.c.data_removed.is_(False),
        jobs.c.created_at < until,
    ]
    if since is not None:
        where.append(jobs.c.created_at >= since)
    if tenant is not None:
        where.append(jobs.c.tenant == tenant)
    return where


class ReplayStore:
    """Replay rows and their recorded inputs (see the module docstring)."""

    def __init__(self, engine: Engine, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self._clock = clock

    async def start(
        self, route: str, route_keys: tuple[str, ...], *, since: datetime | None,
        max_inputs: int | None, baseline_percent: float, who: str, tenant: str | None = None,
    ) -> Replay:
        """A new running replay of ``route``: its inputs are counted now (``total``, at
        most ``max_inputs``), among those created before now.

        Raises
        ------
        Conflict
            ``route`` has a running replay already (one at a time per route).
        """
        now = self._clock.now()
        where = recorded_where(route_keys, since=since, until=now, tenant=tenant)
        count = sa.select(sa.func.count()).select_from(jobs).where(*where)
        async with self._engine.begin() as conn:
            await self._lock_route(conn, route)
            await self._refuse_running(conn, route)
            total = int((await conn.execute(count)).scalar_one())
            if max_inputs is not None:
                total = min(total, max_inputs)
            replay_id = ids.new_prediction_id()
            row = {
                "id": replay_id, "route": route, "tenant": tenant,
                "since": since, "until": now, "max_inputs": max_inputs,
                "baseline_percent": baseline_percent, "state": "running", "total": total,
                "sent": 0, "skipped": 0, "jobs": 0, "who": who, "created_at": now,
                "updated_at": now,
            }
            await conn.execute(shadow_replays.insert().values(**row))
        return await self.get(replay_id)

    async def _lock_route(self, conn: Connection, route: str) -> None:
        """Serialize starts and resumes of one route: PostgreSQL locks the route's row
        (SQLite's write transaction is already the only one)."""
        if conn.dialect.name == "postgresql":
            await conn.execute(sa.select(routes.c.key).where(routes.c.key == route)
                               .with_for_update())

    async def _refuse_running(self, conn: Connection, route: str) -> None:
        running = sa.select(shadow_replays.c.id).where(
            shadow_replays.c.route == route, shadow_replays.c.state == "running")
        if (found := (await conn.execute(running)).scalar()) is not None:
            raise Conflict(f"route {route!r} has a running replay already ({found}): stop "
                           "it first, or wait until it finishes")

    async def get(self, replay_id: str, route: str | None = None) -> Replay:
        """One replay with its jobs' progress; ``NotFound`` for an unknown id (or one of
        another route than ``route``, when given)."""
        query = sa.select(shadow_replays).where(shadow_replays.c.id == replay_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
            if row is None or (route is not None and row.route != route):
                raise NotFound(f"replay {replay_id!r} does not exist"
                               + (f" for route {route!r}" if route else ""))
            done, dropped = await self._job_counts(conn, replay_id)
        return _replay(row, done, dropped)

    async def _job_counts(self, conn: Connection, replay_id: str) -> tuple[int, int]:
        mine = [jobs.c.replay_id == replay_id, jobs.c.state.in_(TERMINAL)]
        done = sa.select(sa.func.count()).where(*mine)
        dropped = sa.select(sa.func.count()).where(*mine, jobs.c.submitted_at.is_(None))
        return (int((await conn.execute(done)).scalar_one()),
                int((await conn.execute(dropped)).scalar_one()))

    async def listing(self, route: str, limit: int = 20) -> list[Replay]:
        """The route's newest ``limit`` replays, newest first, with their progress."""
        query = (sa.select(shadow_replays).where(shadow_replays.c.route == route)
                 .order_by(shadow_replays.c.created_at.desc(), shadow_replays.c.id.desc())
                 .limit(limit))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
            return [_replay(r, *(await self._job_counts(conn, r.id))) for r in rows]

    async def latest(self, route: str, state: str | None = None) -> Replay | None:
        """The route's newest replay (in ``state``, when given), or None."""
        for replay in await self.listing(route, limit=50):
            if state is None or replay.state == state:
                return replay
        return None

    async def stop(self, replay_id: str, route: str) -> Replay:
        """A running replay stopped: it hands out no more inputs (the jobs it made run to
        their end); ``Conflict`` when it is not running."""
        await self._move(replay_id, route, "running", "stopped")
        return await self.get(replay_id)

    async def resume(self, replay_id: str, route: str) -> Replay:
        """A stopped replay running again from where it stopped; ``Conflict`` when it is
        not stopped, or the route has another running replay."""
        async with self._engine.begin() as conn:
            await self._lock_route(conn, route)
            await self._refuse_running(conn, route)
            await self._move(replay_id, route, "stopped", "running", conn)
        return await self.get(replay_id)

    async def _move(self, replay_id: str, route: str, old: str, new: str,
                    conn: Connection | None = None) -> None:
        update = (shadow_replays.update()
                  .where(shadow_replays.c.id == replay_id, shadow_replays.c.route == route,
                         shadow_replays.c.state == old)
                  .values(state=new, updated_at=self._clock.now(), lease_owner=None,
                          leased_until=None))
        if conn is None:
            async with self._engine.begin() as own:
                moved = (await own.execute(update)).rowcount
        else:
            moved = (await conn.execute(update)).rowcount
        if not moved:
            found = await self.get(replay_id, route)  # NotFound first
            raise Conflict(f"replay {replay_id} is {found.state}, not {old}: it cannot be "
                           f"{'stopped' if new == 'stopped' else 'resumed'}")

    async def lease(self, owner: str, lease_s: float) -> list[Replay]:
        """The running replays this process now holds: each one's lease is taken when
        free (or renewed when already ``owner``'s) for ``lease_s`` seconds, so only one
        gateway process advances a replay at a time."""
        now = self._clock.now()
        until = now + timedelta(seconds=lease_s)
        table = shadow_replays
        mine_or_free = sa.or_(lease.unleased(table, now), table.c.lease_owner == owner)
        held = []
        async with self._engine.connect() as conn:
            found = (await conn.execute(sa.select(table.c.id).where(
                table.c.state == "running", mine_or_free))).scalars().all()
        for replay_id in found:
            async with self._engine.begin() as conn:
                took = await conn.execute(
                    table.update().where(table.c.id == replay_id, table.c.state == "running",
                                         mine_or_free)
                    .values(lease_owner=owner, leased_until=until))
            if took.rowcount:
                held.append(await self.get(replay_id))
        return held

    async def next_inputs(self, replay: Replay, route_keys: tuple[str, ...], limit: int
                          ) -> list[RecordedInput]:
        """The replay's next ``limit`` recorded inputs after its cursor, newest first,
        never more than it has left (``total - sent``)."""
        limit = min(limit, replay.total - replay.sent)
        if limit <= 0:
            return []
        where = recorded_where(route_keys, since=replay.since, until=replay.until,
                               tenant=replay.tenant)
        if replay.cursor is not None:
            at, last = replay.cursor
            where.append(sa.or_(jobs.c.created_at < at,
                                sa.and_(jobs.c.created_at == at, jobs.c.id < last)))
        query = (sa.select(jobs.c.id, jobs.c.model, jobs.c.version, jobs.c.deployment,
                           jobs.c.input, jobs.c.tenant, jobs.c.created_at)
                 .where(*where).order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
                 .limit(limit))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [RecordedInput(r.id, r.model, r.version, r.deployment, r.input or {}, r.tenant,
                              r.created_at) for r in rows]

    async def hand_out(self, replay: Replay, owner: str, handed: list[RecordedInput],
                       made: list[NewJob], skipped: int) -> bool:
        """Insert the shadow jobs ``made`` for the inputs ``handed`` (``skipped`` of them
        refused by the shadow policy) and move the replay's cursor past them, in one
        transaction; False (nothing written) when the replay is no longer running or no
        longer leased by ``owner``. A job whose input and arm this replay has already
        sent is not inserted again."""
        if not handed:
            return True
        now = self._clock.now()
        last = handed[-1]
        table = shadow_replays
        async with self._engine.begin() as conn:
            moved = await conn.execute(
                table.update()
                .where(table.c.id == replay.id, table.c.state == "running",
                       table.c.lease_owner == owner)
                .values(sent=table.c.sent + len(handed), skipped=table.c.skipped + skipped,
                        jobs=table.c.jobs + len(made), cursor_at=last.created_at,
                        cursor_id=last.id, updated_at=now))
            if not moved.rowcount:
                return False
            if made:
                insert = db.dialect_insert(conn)
                await conn.execute(
                    insert(jobs).on_conflict_do_nothing(
                        index_elements=[jobs.c.replay_id, jobs.c.shadow_of, jobs.c.arm]),
                    [new_row(job, now) for job in made])
        return True

    async def finish(self, replay: Replay, owner: str) -> bool:
        """Mark a replay ``finished`` once every input was handed out and every job it
        made is terminal; True when it was."""
        now = self._clock.now()
        table = shadow_replays
        open_jobs = sa.select(sa.func.count()).where(
            jobs.c.replay_id == replay.id, jobs.c.state.not_in(TERMINAL))
        async with self._engine.begin() as conn:
            if int((await conn.execute(open_jobs)).scalar_one()):
                return False
            moved = await conn.execute(
                table.update()
                .where(table.c.id == replay.id, table.c.state == "running",
                       table.c.lease_owner == owner, table.c.sent >= table.c.total)
                .values(state="finished", finished_at=now, updated_at=now, lease_owner=None,
                        leased_until=None))
        return bool(moved.rowcount)

    async def waiting(self, route: str) -> int:
        """The route's shadows (live and replayed) not yet sent to their provider: a
        replay counts them against the budget too, so it never queues more than fits."""
        query = sa.select(sa.func.count()).where(
            jobs.c.route == route, jobs.c.arm.in_(("shadow", "baseline")),
            jobs.c.state.in_(UNSUBMITTED), jobs.c.submitted_at.is_(None))
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())
