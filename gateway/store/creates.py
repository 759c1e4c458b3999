"""Group commit of new jobs: creates that arrive together share one transaction.

Every create must be committed before its 201 is sent (DESIGN "data path": the job row
is written first), and a commit is the expensive part: on SQLite one writer at a time,
each commit its own ``BEGIN IMMEDIATE`` and WAL write. So :class:`CreateBatcher` queues
the rows of concurrent creates and a single flusher inserts everything queued in one
transaction (one multi-row ``INSERT``); the creates that arrive while that commit is in
flight form the next group. No timer: a lone create is committed at once, and a group
grows only while the store is busy. Each create's caller is answered only after its own
row is committed, so a crash right after a 201 never loses the prediction.

A group whose insert fails (an idempotency key used twice, a value the store refuses, or
any other error: its callers must get an answer) is retried row by row through
:meth:`gateway.store.jobs.JobStore.create`, so one bad row fails only its own request and
a reused key still gets its stored job or its conflict. A row found already stored under
its own id (the group's COMMIT went through but its answer was lost) is that create's,
committed: it gets its 201, not a 500 for a prediction that then runs anyway. The answer
is built from the inserted values themselves: nothing is read back.

A flusher cancelled before it answered its group (at shutdown) answers it, and the creates
queued behind it, with :class:`contracts.errors.ServiceUnavailable` (503, retry): its
commit may or may not have happened, and only a commit seen to succeed earns a 201
(docs/reliability.md, "Shutdown and the store").
"""

from __future__ import annotations

import asyncio
import logging

from contracts.errors import ServiceUnavailable
from contracts.job import Job
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store.jobs import JobStore, NewJob
from gateway.store.records import new_row
from gateway.store.schema import jobs

__all__ = ["CreateBatcher"]

log = logging.getLogger(__name__)

MAX_GROUP = 250  # creates per INSERT (two rows with a shadow): under SQLite's 32,766
# bound parameters
_Queued = tuple[NewJob, NewJob | None, asyncio.Future[tuple[Job, bool]]]


class CreateBatcher:
    """Commits new jobs in groups (see the module docstring).

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
        self._queue: list[_Queued] = []
        self._flusher: asyncio.Task[None] | None = None

    async def create(self, new: NewJob, shadow: NewJob | None = None) -> tuple[Job, bool]:
        """Insert ``new`` in state ``creating``; ``(job, created)`` once committed.

        Same contract as :meth:`gateway.store.jobs.JobStore.create` (``Conflict`` for an
        idempotency key used for another request); ``shadow``, its hidden copy, goes in
        the same transaction (docs/shadow.md).
        """
        future: asyncio.Future[tuple[Job, bool]] = asyncio.get_running_loop().create_future()
        self._queue.append((new, shadow, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="create-flusher")
        # shield: a caller that goes away does not cancel the commit of the others
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        group: list[_Queued] = []
        try:
            while self._queue:
                group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
                await self._commit(group)
        except asyncio.CancelledError:
            # Cancelled (at shutdown) before its group was answered: whether that group's
            # commit happened is not known, so no 201 - a 503 to retry (an idempotency
            # key then finds the stored job); the creates queued behind it, never begun,
            # get the same answer rather than no answer at all.
            stopped = ServiceUnavailable("the gateway stopped before the prediction was "
                                         "known to be stored; retry")
            for _, _, future in [*group, *self._queue]:
                if not future.done():
                    future.set_exception(stopped)
            self._queue = []
            raise

    async def _commit(self, group: list[_Queued]) -> None:
        try:
            created = await self._insert([(new, shadow) for new, shadow, _ in group])
        except Exception as exc:  # noqa: BLE001 (each row alone: its own caller's answer)
            log.info("create_group_retried_alone", extra={"rows": len(group),
                                                         "error": type(exc).__name__})
            await asyncio.gather(*(self._alone(*queued) for queued in group))
            return
        for (_, _, future), job in zip(group, created, strict=True):
            if not future.done():
                future.set_result((job, True))

    async def _alone(
        self, new: NewJob, shadow: NewJob | None, future: asyncio.Future[tuple[Job, bool]]
    ) -> None:
        try:
            result = await self._store.create(new, shadow)
        except Exception as exc:  # noqa: BLE001 (handed to the one caller it belongs to)
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)

    async def _insert(self, group: list[tuple[NewJob, NewJob | None]]) -> list[Job]:
        primaries, rows = [], []
        for new, shadow in group:
            now = new.created_at or self._clock.now()
            primaries.append(new_row(new, now))
            rows += [primaries[-1], *([new_row(shadow, now)] if shadow is not None else [])]
        async with self._store.engine.begin() as conn:
            await conn.execute(jobs.insert(), rows)
        return [Job.model_validate(row) for row in primaries]
