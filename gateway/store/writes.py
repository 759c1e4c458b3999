"""Guarded job writes, committed in groups (:mod:`gateway.store.engine.group`).

Every transition of :class:`gateway.store.jobs.JobStore` (a submit recorded, progress, the
terminal write) is one :class:`Write`: ``decide`` the columns from the job as read, build
the outbox payload before the transaction (on a worker thread: holding the row lock, and
SQLite's one connection, meanwhile would stall writers), then write if the locked row is
still the job that was read; otherwise read and decide again. Writes that arrive
together (the dispatcher records a round's submits at once, the event processor a
round's completions) share one read, one transaction and one ``UPDATE`` per set of
columns; two writes of one job never share a group. A group that fails is run again
write by write, so a value one job's write cannot store fails that write alone.

On a SQLite file, a group that writes no outbox row and runs nothing beside its updates
(the common case of a prediction without a webhook: its submit, progress and terminal
write) runs through the standard library's ``sqlite3``
(:mod:`gateway.store.engine.fastwrite`): the same check, the same ``UPDATE`` with the
values converted by the columns' own SQLAlchemy bind processors, in one synchronous
transaction, at a fraction of the engine's per-transaction and per-statement cost
(docs/benchmarks.md, "A run() with its job writes on sqlite3"). Whatever it cannot do
there (locked, an error, a value that needs an outbox row after all) goes through the
engine as before, nothing having been written.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from contracts.errors import ServiceUnavailable
from contracts.job import Job
from gateway.clock import Clock
from gateway.store import ordering, outbox
from gateway.store.engine.aio import Connection, Engine
from gateway.store.engine.fastwrite import FastWrites, SqliteConnection, bound, in_list
from gateway.store.engine.group import Group, update_rows
from gateway.store.handoff import Handed
from gateway.store.reader import ROWS_SQL, SqliteReads, job_of
from gateway.store.records import job_from_row
from gateway.store.schema import UTCDateTime, jobs

__all__ = ["JobWrites", "Write", "stored_as_given", "update_sql"]

MAX_RACES = 5
INLINE_BYTES = 64 * 1024  # payloads up to this are planned on the event loop (docs/lifecycle.md)
INLINE_ITEMS = 4096
MAX_GROUP = 200  # jobs per group: well under SQLite's bound-parameter limit in IN (...)


@dataclass(frozen=True)
class Write:
    """One guarded write of a job in one of the states ``allowed``; ``also`` runs in its
    transaction (e.g. the asset rows of a terminal write)."""

    job_id: str
    decide: Callable[[Job], dict[str, Any] | None]
    allowed: Sequence[str]
    also: Callable[[Connection], Awaitable[object]] | None = None


@dataclass
class _Ready:
    index: int
    write: Write
    old: Job
    values: dict[str, Any]
    predicted: Job
    raw: tuple[Any, ...] | None  # ``old``'s row as SqliteReads read it
    plan: outbox.Plan = field(default_factory=outbox.Plan)


class JobWrites:
    """Runs :class:`Write` s in groups (see the module docstring).

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    planner : outbox.Planner
        Decides which outbound webhook events a transition causes.
    reads : SqliteReads
        Lock-free reads on SQLite (the engine's otherwise).
    clock : Clock
        Injected time source.
    """

    def __init__(
        self, engine: Engine, planner: outbox.Planner, reads: SqliteReads, clock: Clock
    ) -> None:
        self._engine = engine
        self._planner = planner
        self._reads = reads
        self._clock = clock
        self._fast = FastWrites(engine)  # groups without outbox rows, on SQLite (module doc)
        self._dialect = engine.dialect
        self._group: Group[Write, Job | None] = Group(
            "job-writes", self._run, max_items=MAX_GROUP, key=lambda w: w.job_id
        )

    async def write(self, write: Write) -> Job | None:
        """The job as written, or None when nothing was written (``decide`` said so, the
        job is not in an allowed state, or it does not exist)."""
        return await self._group(write)

    async def _run(self, writes: list[Write]) -> list[Job | BaseException | None]:
        results: dict[int, Job | BaseException | None] = {}
        pending = list(range(len(writes)))
        for attempt in range(MAX_RACES):
            if not pending:
                break
            ready = await self._prepare(writes, pending, results, fast=attempt == 0)
            pending = await self._commit(ready, results) if ready else []
        for index in pending:
            job_id = writes[index].job_id
            results[index] = ServiceUnavailable(
                f"prediction {job_id} kept changing while it was written"
            )
        return [results[i] for i in range(len(writes))]

    async def _prepare(
        self, writes: list[Write], pending: list[int], results: dict[int, Any], *, fast: bool
    ) -> list[_Ready]:
        """Read the jobs (after a race, through the engine, as the locked read does),
        decide each write and plan its events (off the event loop)."""
        olds, raws = await self._read([writes[i].job_id for i in pending], fast=fast)
        ready = []
        for index in pending:
            write = writes[index]
            old = olds.get(write.job_id)
            try:
                values = None
                if old is not None and old.state.value in write.allowed:
                    values = write.decide(old)
            except Exception as exc:  # noqa: BLE001 (that write's caller gets it)
                results[index] = exc
                continue
            if old is None or values is None:
                results[index] = None
                continue
            predicted = ordering.predicted(old, values)
            raw = None if raws is None else raws.get(old.id)
            ready.append(_Ready(index, write, old, values, predicted, raw))
        if not any(r.old.webhook for r in ready):
            return ready
        if _small([r.predicted for r in ready if r.old.webhook]):
            plans = self._plans(ready)  # microseconds: a thread hop would cost more
        else:
            plans = await asyncio.to_thread(self._plans, ready)
        planned = []
        for item, plan in zip(ready, plans, strict=True):
            if isinstance(plan, BaseException):
                results[item.index] = plan
            else:
                item.plan = plan
                planned.append(item)
        return planned

    def _plans(self, ready: list[_Ready]) -> list[outbox.Plan | BaseException]:
        plans: list[outbox.Plan | BaseException] = []
        for item in ready:
            try:
                plans.append(self._planner.plan(item.old, item.predicted))
            except Exception as exc:  # noqa: BLE001 (ValueRefused: that write's caller)
                plans.append(exc)
        return plans

    async def _commit(self, ready: list[_Ready], results: dict[int, Any]) -> list[int]:
        """Write the ready ones whose row is unchanged; return the indexes that raced."""
        handed = Handed()
        try:
            raced = await self._transaction(ready, results, handed)
        except BaseException:
            self._settle(handed, committed=False)
            raise
        self._settle(handed, committed=True)
        return raced

    def _settle(self, handed: Handed, *, committed: bool) -> None:
        if handed.rows and self._planner.handoff is not None:
            self._planner.handoff.settle(handed, committed=committed)

    async def _transaction(
        self, ready: list[_Ready], results: dict[int, Any], handed: Handed
    ) -> list[int]:
        if all(item.plan.events == () and item.write.also is None for item in ready):
            try:
                done = self._fast.run(lambda conn: self._transaction_fast(conn, ready))
            except _NeedsEngine:
                done = None  # rolled back: nothing written
            if done is not None:
                raced, fast_results = done
                results.update(fast_results)
                return raced
        raced = []
        async with self._engine.begin() as conn:
            unchanged = await self._unchanged(conn, ready)
            going = []
            for item in ready:
                if item.old.id not in unchanged:
                    raced.append(item.index)  # changed since it was read: decide again
                else:
                    going.append(item)
            if not going:
                return raced
            await _update(conn, going)
            unsure = {item.old.id for item in going if not stored_as_given(item.values)}
            written = await _select(conn, sorted(unsure), lock=False) if unsure else {}
            transitions = []
            for item in going:
                new = written.get(item.old.id) if item.old.id in unsure else item.predicted
                results[item.index] = new
                if new is None:
                    continue
                plan = item.plan
                if new != item.predicted:  # the store normalised a value: plan what it holds
                    plan = self._planner.plan(item.old, new)
                if item.write.also is not None:
                    await item.write.also(conn)
                transitions.append((item.old, new, plan))
            await self._planner.write_many(conn, transitions, self._clock.now(), handed)
        return raced

    def _transaction_fast(
        self, conn: SqliteConnection, ready: list[_Ready]
    ) -> tuple[list[int], dict[int, Job | None]]:
        """:meth:`_transaction` on ``sqlite3`` inside ``BEGIN IMMEDIATE`` (module
        docstring): the rows compared as stored, updated, and read back only where a value
        may come back changed. Raises :class:`_NeedsEngine` when a job's write turns out to
        cause outbox events (a value the store normalised)."""
        ids = sorted(item.old.id for item in ready)  # one lock order in every process
        held = {row[0]: tuple(row) for row in conn.execute(ROWS_SQL.format(in_list(len(ids))),
                                                           ids)}
        raced: list[int] = []
        going: list[_Ready] = []
        for item in ready:
            row = held.get(item.old.id)
            if row is not None and (
                row == item.raw if item.raw is not None else job_of(row) == item.old
            ):
                going.append(item)
            else:
                raced.append(item.index)  # changed since it was read: decide again
        written: dict[int, Job | None] = {}
        if not going:
            return raced, written
        shapes: dict[tuple[str, ...], list[list[Any]]] = {}
        for item in going:
            names = tuple(sorted(item.values))
            params = bound(jobs, self._dialect, names, item.values)
            shapes.setdefault(names, []).append([*params, item.old.id, item.old.state.value])
        for names, params in shapes.items():
            conn.executemany(update_sql(names), params)
        unsure = sorted(item.old.id for item in going if not stored_as_given(item.values))
        back = ({row[0]: job_of(row) for row in conn.execute(
            ROWS_SQL.format(in_list(len(unsure))), unsure)} if unsure else {})
        for item in going:
            new = back.get(item.old.id) if item.old.id in back else item.predicted
            if item.old.id in unsure and new != item.predicted and new is not None:
                if self._planner.plan(item.old, new).events:
                    raise _NeedsEngine
            written[item.index] = new
            if new is not None and item.old.state is not new.state:
                outbox.log_transition(item.old, new)
        return raced, written

    async def _read(
        self, ids: list[str], *, fast: bool
    ) -> tuple[dict[str, Job], dict[str, tuple[Any, ...]] | None]:
        """The jobs by id, and their rows when :class:`SqliteReads` read them."""
        rows = self._reads.rows(ids) if fast else None
        if rows is not None:
            return {job_id: job_of(row) for job_id, row in rows.items()}, rows
        async with self._engine.read() as conn:
            return await _select(conn, ids, lock=False), None

    async def _unchanged(self, conn: Connection, ready: list[_Ready]) -> set[str]:
        """The ids of the jobs the transaction ``conn`` holds, locked, as they were read.
        On SQLite, once ``BEGIN IMMEDIATE`` has run no connection can commit until this
        transaction ends, and it has written nothing yet: the lock-free reader sees what
        ``conn`` would, and its rows are compared as stored (no conversion; about 10 us
        against 100 us and more through the engine) when it read them the first time."""
        ids = sorted(item.old.id for item in ready)  # one lock order in every process
        if conn.dialect.name == "sqlite" and all(item.raw is not None for item in ready):
            rows = self._reads.rows(ids)
            if rows is not None:
                return {item.old.id for item in ready if rows.get(item.old.id) == item.raw}
        locked = await _select(conn, ids, lock=True)
        return {item.old.id for item in ready if locked.get(item.old.id) == item.old}


class _NeedsEngine(Exception):  # a signal, not an error: the group goes through the engine
    """A write of the ``sqlite3`` path would cause outbox events; rolled back."""


@functools.lru_cache(maxsize=64)
def update_sql(names: tuple[str, ...]) -> str:
    """``UPDATE jobs SET`` the columns ``names`` ``WHERE`` the id and state match (fixed
    column names: one string per set of columns)."""
    sets = ", ".join(f"{name} = ?" for name in names)
    return f"UPDATE jobs SET {sets} WHERE id = ? AND state = ?"  # noqa: S608 (column names)


def _small(jobs_: list[Job]) -> bool:
    """Whether serialising these jobs' payloads is quick enough for the event loop: their
    variable parts (input, output, logs, error, metrics) hold at most
    :data:`INLINE_BYTES` characters and :data:`INLINE_ITEMS` values in all (counted
    with an early exit, so a large job costs no more than the limit to rule out)."""
    chars, items = INLINE_BYTES, INLINE_ITEMS
    stack: list[Any] = []
    for job in jobs_:
        stack += [job.input, job.output, job.logs, job.error, job.metrics]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            chars -= len(value)
        elif isinstance(value, dict | list | tuple):
            items -= len(value)
            if items < 0:
                return False
            if isinstance(value, dict):
                chars -= sum(len(k) for k in value if isinstance(k, str))
                stack.extend(value.values())
            else:
                stack.extend(value)
        if chars < 0:
            return False
    return True


_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
_MODEL_COLUMNS = [c for c in jobs.c if c.name in Job.model_fields]  # not leases, tokens, keys
_READ = sa.select(*_MODEL_COLUMNS).where(jobs.c.id.in_(_IDS)).order_by(jobs.c.id)  # built once
# FOR NO KEY UPDATE: the id never changes, so new provider events (whose foreign key
# takes KEY SHARE on the job) are not held up by a write
_LOCK = _READ.with_for_update(key_share=True)


async def _select(conn: Connection, ids: list[str], *, lock: bool) -> dict[str, Job]:
    rows = await conn.execute(_LOCK if lock else _READ, {"ids": ids})
    return {row.id: job_from_row(row) for row in rows}


def _plain_kind(column: sa.Column[Any]) -> type | None:
    """The one Python type ``column`` gives back as it was given on both backends: ``str``
    in a text column, ``int`` in an integer one, ``bool`` in a boolean one, a (UTC)
    ``datetime`` in a :class:`UTCDateTime` one (microseconds kept by both); None for JSON
    and anything else, which may come back changed (tuples as lists, keys as strings)."""
    if isinstance(column.type, UTCDateTime):
        return datetime
    if isinstance(column.type, sa.JSON):
        return None
    if isinstance(column.type, sa.Boolean):
        return bool
    if isinstance(column.type, sa.Integer):
        return int
    return str if isinstance(column.type, sa.String) else None  # Text is a String


_PLAIN_KINDS = {column.name: _plain_kind(column) for column in jobs.c}  # built once


def stored_as_given(values: dict[str, Any]) -> bool:
    """Whether the job ``values`` make is :func:`ordering.predicted`'s exactly, so the
    written row need not be read back: each value None, or of its column's plain kind
    (:func:`_plain_kind`; a datetime in UTC)."""
    for name, value in values.items():
        if value is None:
            if name not in _PLAIN_KINDS:
                return False
            continue
        kind = type(value)
        if kind is not _PLAIN_KINDS.get(name) or (kind is datetime and value.tzinfo is not UTC):
            return False
    return True


async def _update(conn: Connection, going: list[_Ready]) -> None:
    """The state the row was read in is the guard: the row is locked and was just
    checked unchanged."""
    rows = [({"id": i.old.id, "state": i.old.state.value}, i.values) for i in going]
    await update_rows(conn, jobs, rows)
