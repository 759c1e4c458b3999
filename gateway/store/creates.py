"""Group commit of new jobs: creates that arrive together share one transaction.

Every create must be committed before its 201 is sent (the job row is written first:
docs/architecture.md, "The data path"), and a commit is the expensive part: on SQLite one
writer at a time, each commit its own ``BEGIN IMMEDIATE`` and WAL write. So
:class:`CreateBatcher` queues the rows of concurrent creates and a single flusher inserts
everything queued in one transaction (one multi-row ``INSERT``); the creates that arrive
while that commit is in flight form the next group. No timer: a lone create is committed
at once, and a group grows only while the store is busy. Each create's caller is answered
only after its own row is committed, so a crash right after a 201 never loses the
prediction.

A group whose insert fails (an idempotency key used twice, a value the store refuses, or
any other error: its callers must get an answer) is retried row by row through
:meth:`gateway.store.jobs.JobStore.create`, so one bad row fails only its own request and
a reused key still gets its stored job or its conflict. A row found already stored under
its own id (the group's COMMIT went through but its answer was lost) is that create's,
committed: it gets its 201, not a 500 for a prediction that then runs anyway. The answer
is built from the inserted values themselves: nothing is read back.

On a SQLite file the group's ``INSERT`` runs through the standard library's ``sqlite3``
(:mod:`gateway.store.engine.fastwrite`), the values bound by the columns' own SQLAlchemy
bind processors, when they are small (a large input is copied into SQLite off the event
loop, by the engine); whatever fails there (a reused key, a locked file) is rolled back
and goes through the engine as before.

A flusher cancelled before it answered its group (at shutdown) answers it, and the creates
queued behind it, with :class:`contracts.errors.ServiceUnavailable` (503, retry): its
commit may or may not have happened, and only a commit seen to succeed earns a 201
(docs/reliability.md, "Shutdown and the store").
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from contracts.job import Job
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store.engine.fastwrite import FastWrites, SqliteConnection, bound
from gateway.store.engine.group import Group
from gateway.store.jobs import JobStore, NewJob
from gateway.store.records import new_row
from gateway.store.schema import jobs

__all__ = ["CreateBatcher"]

INLINE_BYTES = 64 * 1024  # a group's text and bytes copied into SQLite on the event loop
MAX_GROUP = 250  # creates per INSERT (two rows with a shadow): under SQLite's 32,766
# bound parameters
_New = tuple[NewJob, NewJob | None]  # a create and its shadow


class CreateBatcher:
    """Commits new jobs in groups (see the module docstring): a
    :class:`gateway.store.engine.group.Group` whose group is one multi-row ``INSERT`` and whose
    item alone is :meth:`gateway.store.jobs.JobStore.create`.

    Parameters
    ----------
    store : JobStore
        The job store (its engine, and its one-row create for the fallback).
    clock : Clock
        Injected time source (``created_at`` when the job has none).
    """

    def __init__(self, store: JobStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock
        self._fast: FastWrites | None = None  # small groups on SQLite (module docstring)
        self._group: Group[_New, tuple[Job, bool]] = Group(
            "creates",
            lambda group: self._insert(group),
            alone=lambda new: self._store.create(*new),
            max_items=MAX_GROUP,
            stopped="the gateway stopped before the prediction was known to be stored; retry",
        )

    @property
    def flusher(self) -> asyncio.Task[None] | None:
        """The task committing the queued creates, if one was started (tests cancel it)."""
        return self._group.flusher

    async def create(self, new: NewJob, shadow: NewJob | None = None) -> tuple[Job, bool]:
        """Insert ``new`` in state ``creating``; ``(job, created)`` once committed.

        Same contract as :meth:`gateway.store.jobs.JobStore.create` (``Conflict`` for an
        idempotency key used for another request); ``shadow``, its hidden copy, goes in
        the same transaction (docs/shadow.md).
        """
        return await self._group((new, shadow))

    async def _insert(self, group: list[_New]) -> list[tuple[Job, bool] | BaseException]:
        primaries, rows = [], []
        for new, shadow in group:
            now = new.created_at or self._clock.now()
            primaries.append(new_row(new, now))
            rows += [primaries[-1], *([new_row(shadow, now)] if shadow is not None else [])]
        if self._fast is None:
            self._fast = FastWrites(self._store.engine)
        try:
            done = self._fast.run(functools.partial(self._insert_fast, rows))
        except _Large:
            done = None  # rolled back: nothing written
        if done is None:
            async with self._store.engine.begin() as conn:
                await conn.execute(jobs.insert(), rows)
        return [(Job.model_validate(row), True) for row in primaries]

    def _insert_fast(self, rows: list[dict[str, Any]], conn: SqliteConnection) -> bool:
        """The group's rows through ``sqlite3`` in :meth:`FastWrites.run`'s transaction;
        :class:`_Large` (rolled back, nothing written) when a value is too large to copy
        on the event loop."""
        dialect = self._store.engine.dialect
        shapes: dict[tuple[str, ...], list[list[Any]]] = {}
        for row in rows:
            names = tuple(row)
            params = bound(jobs, dialect, names, row)
            if sum(len(p) for p in params if isinstance(p, str | bytes)) > INLINE_BYTES:
                raise _Large
            shapes.setdefault(names, []).append(params)
        for names, params in shapes.items():
            conn.executemany(_insert_sql(names), params)
        return True


class _Large(Exception):  # a signal, not an error: the group goes through the engine
    """A value of the group is too large for the ``sqlite3`` path."""


@functools.lru_cache(maxsize=16)
def _insert_sql(names: tuple[str, ...]) -> str:
    """``INSERT INTO jobs`` the columns ``names`` (fixed column names)."""
    marks = ", ".join("?" * len(names))
    return f"INSERT INTO jobs ({', '.join(names)}) VALUES ({marks})"  # noqa: S608
