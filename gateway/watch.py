"""The watcher: tells ``Prefer: wait`` requests when their prediction finished elsewhere.

A prediction may be finished by another gateway process sharing the store. Rather than
every waiting request re-reading its job (hundreds of waiters would swamp the store),
one loop per process asks the store, every ``interval_s``, which of the waited-on jobs
are terminal, in one query, and wakes their waiters (:class:`gateway.notify.Notifier`).
Changes made in this process wake waiters directly.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts.job import TERMINAL_STATES
from gateway.loop import Loop
from gateway.notify import Notifier
from gateway.store.schema import jobs

__all__ = ["Watcher"]

_TERMINAL = [s.value for s in TERMINAL_STATES]
_BATCH = 500


class Watcher(Loop):
    """Wakes waiters of jobs that reached a terminal state (see the module docstring)."""

    name = "watcher"

    def __init__(self, *, engine: AsyncEngine, notifier: Notifier, interval_s: float) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s)
        self._engine = engine

    async def run_once(self) -> int:
        """Wake the waiters of finished jobs; return 0 (the loop then sleeps its interval)."""
        waited = self._notifier.waited_jobs()
        for start in range(0, len(waited), _BATCH):
            chunk = waited[start : start + _BATCH]
            query = sa.select(jobs.c.id).where(jobs.c.id.in_(chunk), jobs.c.state.in_(_TERMINAL))
            async with self._engine.connect() as conn:
                for job_id in (await conn.execute(query)).scalars():
                    self._notifier.job_changed(job_id)
        return 0
