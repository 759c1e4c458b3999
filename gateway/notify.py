"""In-process wake-ups: "job X changed", "work is waiting".

A change made in this process hands waiters the changed job itself, so a thousand
``Prefer: wait`` requests on one prediction cost no store reads; a wake-up without the
job (from :mod:`gateway.watch`, for changes made by another process) asks the waiter to
read the store once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from datetime import datetime
from enum import StrEnum

from contracts.job import Job

__all__ = ["LoopName", "Notifier"]


class LoopName(StrEnum):
    """The background loops a wake-up can address: each :class:`gateway.loop.Loop` has
    one (its value names the loop in ``loop_round_failed`` log lines)."""

    DISPATCHER = "dispatcher"
    POLLER = "poller"
    EVENTS = "events"
    DELIVERY = "delivery"
    REAPER = "reaper"
    WATCHER = "watcher"
    GUARD = "guard"
    ROUTES = "routes"
    REPLAY = "replay"
    RETENTION = "retention"


class Notifier:
    """Per-job change events plus named work signals for background loops."""

    def __init__(self) -> None:
        self._jobs: defaultdict[str, set[asyncio.Future[Job | None]]] = defaultdict(set)
        # a change that came after a waiter was woken, before it ran again (wait_job)
        self._later: dict[asyncio.Future[Job | None], Job | None] = {}
        self._work: defaultdict[LoopName, asyncio.Event] = defaultdict(asyncio.Event)
        self._until: dict[LoopName, datetime] = {}  # when each sleeping loop wakes by itself

    def job_changed(self, job_id: str, job: Job | None = None) -> None:
        """Wake everyone waiting on ``job_id``, handing them ``job`` when it is known."""
        if job is None or job.webhook is not None:  # it may have written webhook events
            self.wake(LoopName.DELIVERY)
        for waiter in self._jobs.get(job_id, ()):
            if not waiter.done():
                waiter.set_result(job)
            else:  # woken, not yet resumed: it gets this later change (wait_job)
                self._later[waiter] = job

    async def wait_job(self, job_id: str, timeout_s: float) -> tuple[bool, Job | None]:
        """Wait until ``job_id`` changes or ``timeout_s`` seconds pass.

        Returns
        -------
        tuple[bool, Job or None]
            ``(True, job)`` when woken (``job`` is None if the waker did not have it: read
            the store), ``(False, None)`` on timeout. ``job`` is the latest change made
            before this returns: one made after the waiter was woken, before it ran again
            (a webhook applied as it is stored can follow the change that woke it within
            the same turn of the event loop), is not lost between two waits.
        """
        waiter: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
        self._jobs[job_id].add(waiter)
        self.wake(LoopName.WATCHER)  # it watches other processes' changes only while someone waits
        try:
            woken = await asyncio.wait_for(waiter, timeout_s)
            return True, self._later.pop(waiter, woken)
        except TimeoutError:
            return False, None
        finally:
            self._later.pop(waiter, None)
            waiters = self._jobs[job_id]
            waiters.discard(waiter)
            if not waiters:
                del self._jobs[job_id]

    def waited_jobs(self) -> list[str]:
        """The ids somebody is waiting on right now (``Prefer: wait`` requests)."""
        return list(self._jobs)

    def wake(self, loop_name: LoopName) -> None:
        """Tell the background loop ``loop_name`` that work is waiting."""
        self._work[loop_name].set()

    def due(self, loop_name: LoopName, at: datetime) -> None:
        """Work for ``loop_name`` falls due ``at``: wake the loop unless it sleeps until
        then or earlier (a loop that is not asleep is woken, so its next round looks)."""
        until = self._until.get(loop_name)
        if until is None or at < until:
            self.wake(loop_name)

    def sleeping_until(self, loop_name: LoopName) -> datetime | None:
        """When ``loop_name``, asleep, wakes by itself; None while it is not asleep (or
        sleeps without saying until when)."""
        return self._until.get(loop_name)

    async def sleep(
        self, loop_name: LoopName, timeout_s: float, until: datetime | None = None
    ) -> None:
        """Wait until woken for ``loop_name`` or ``timeout_s`` passes; ``until`` (the
        loop clock's time ``timeout_s`` from now) lets :meth:`due` skip needless wakes."""
        event = self._work[loop_name]
        if until is not None:
            self._until[loop_name] = until
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            self._until.pop(loop_name, None)
        event.clear()
