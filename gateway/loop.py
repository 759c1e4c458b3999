"""The one shape of every background loop (STYLE.md rule 10).

``run()`` repeats ``run_once()`` until ``stop()``; between rounds it sleeps until woken
(:class:`gateway.notify.Notifier`) or ``interval_s`` passes, and goes round again at once
when the last round did work. Errors are caught only here, logged with context, and the
loop carries on; ``CancelledError`` is never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod

from gateway.notify import Notifier

__all__ = ["Loop"]

log = logging.getLogger(__name__)


class Loop(ABC):
    """A background loop named ``name`` that the notifier can wake."""

    name: str = "loop"

    def __init__(self, *, notifier: Notifier, interval_s: float) -> None:
        self._notifier = notifier
        self._interval_s = interval_s
        self._stopping = asyncio.Event()

    @abstractmethod
    async def run_once(self) -> int:
        """Do one round of work; return how many items were handled."""

    async def run(self) -> None:
        """Run rounds until :meth:`stop` is called."""
        while not self._stopping.is_set():
            try:
                handled = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop boundary: log and keep going
                log.exception("loop_round_failed", extra={"loop": self.name})
                handled = 0
            if handled == 0 and not self._stopping.is_set():
                await self._notifier.sleep(self.name, self._interval_s)

    def stop(self) -> None:
        """Ask the loop to finish its current round and return."""
        self._stopping.set()
        self._notifier.wake(self.name)
