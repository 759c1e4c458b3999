"""The watcher: tells ``Prefer: wait`` requests when their prediction finished elsewhere.

A prediction may be finished by another gateway process sharing the store. Rather than
every waiting request re-reading its job (hundreds of waiters would swamp the store),
one loop per process asks the store, every ``interval_s``, which of the waited-on jobs
are terminal, in one query, and wakes their waiters (:class:`gateway.notify.Notifier`).
Changes made in this process wake waiters directly.
"""

from __future__ import annotations

from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.store.jobs import JobStore

__all__ = ["Watcher"]


class Watcher(Loop):
    """Wakes waiters of jobs that reached a terminal state (see the module docstring)."""

    name = LoopName.WATCHER

    def __init__(self, *, store: JobStore, notifier: Notifier, interval_s: float) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s)
        self._store = store

    async def idle_s(self) -> float:
        """Every ``interval_s`` while somebody waits; otherwise until a wait begins
        (:meth:`gateway.notify.Notifier.wait_job` wakes this loop)."""
        return self._interval_s if self._notifier.waited_jobs() else self.max_idle_s

    async def run_once(self) -> int:
        """Wake the waiters of finished jobs; return 0 (the loop then sleeps its interval)."""
        for job_id in await self._store.terminal_among(self._notifier.waited_jobs()):
            self._notifier.job_changed(job_id)
        return 0
