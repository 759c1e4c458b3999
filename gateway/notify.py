"""In-process wake-ups: "job X changed", "work is waiting".

Waiters still re-read the store (another gateway process may have made the change); a
wake-up only shortens the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

__all__ = ["Notifier"]


class Notifier:
    """Per-job change events plus named work signals for background loops."""

    def __init__(self) -> None:
        self._jobs: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._work: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def job_changed(self, job_id: str) -> None:
        """Wake everyone waiting on ``job_id``."""
        for event in self._jobs.get(job_id, ()):
            event.set()

    async def wait_job(self, job_id: str, timeout_s: float) -> None:
        """Return when ``job_id`` changes or after ``timeout_s`` seconds."""
        event = asyncio.Event()
        self._jobs[job_id].add(event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            waiters = self._jobs[job_id]
            waiters.discard(event)
            if not waiters:
                del self._jobs[job_id]

    def waited_jobs(self) -> list[str]:
        """The ids somebody is waiting on right now (``Prefer: wait`` requests)."""
        return list(self._jobs)

    def wake(self, loop_name: str) -> None:
        """Tell the background loop ``loop_name`` that work is waiting."""
        self._work[loop_name].set()

    async def sleep(self, loop_name: str, timeout_s: float) -> None:
        """Wait until woken for ``loop_name`` or ``timeout_s`` passes."""
        event = self._work[loop_name]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
        event.clear()
