"""The watcher: tells ``Prefer: wait`` requests when their prediction finished elsewhere.

A prediction may be finished by another gateway process sharing the store. Rather than
every waiting request re-reading its job (hundreds of waiters would swamp the store),
one loop per process asks the store, every ``interval_s``, which of the waited-on jobs
are terminal, in one query, and wakes their waiters (:class:`gateway.notify.Notifier`).
Changes made in this process wake waiters directly.

A job is asked about only once it has been waited on for ``interval_s``: most waits end
sooner, woken by this process's own change (a fast prediction's whole ``run()`` takes
milliseconds), and asking about them cost a store read per change of every waited job
(each change ends one wait and begins the next, which wakes this loop). So a job
finished by another process wakes its waiters within about two intervals of the finish
(docs/lifecycle.md, "Held answers across processes").
"""

from __future__ import annotations

from datetime import datetime

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.store.jobs import JobStore

__all__ = ["Watcher"]


class Watcher(Loop):
    """Wakes waiters of jobs that reached a terminal state (see the module docstring)."""

    name = LoopName.WATCHER

    def __init__(
        self, *, store: JobStore, notifier: Notifier, interval_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._store = store
        self._since: dict[str, datetime] = {}  # job id -> when a round first saw it waited on

    async def idle_s(self) -> float:
        """Every ``interval_s`` while somebody waits; otherwise until a wait begins
        (:meth:`gateway.notify.Notifier.wait_job` wakes this loop)."""
        return self._interval_s if self._notifier.waited_jobs() else self.max_idle_s

    async def run_once(self) -> int:
        """Wake the waiters of finished jobs waited on for ``interval_s`` or longer;
        return 0 (the loop then sleeps its interval)."""
        now = self._clock.now()
        self._since = {job_id: self._since.get(job_id, now)
                       for job_id in self._notifier.waited_jobs()}
        due = [job_id for job_id, since in self._since.items()
               if (now - since).total_seconds() >= self._interval_s]
        if not due:
            return 0
        for job_id in await self._store.terminal_among(due):
            self._notifier.job_changed(job_id)
        return 0
