"""The one shape of every background loop (docs/architecture.md, rule 10).

``run()`` repeats ``run_once()`` until ``stop()``; between rounds it sleeps until woken
(:class:`gateway.notify.Notifier`) or until :meth:`Loop.idle_s` passes, and goes round
again at once when the last round did work. A loop that knows when its next work falls
due (:mod:`gateway.store.due`) sleeps until then, at most ``max_idle_s``: an idle gateway
does not query its store every ``interval_s`` (docs/benchmarks.md). Items fail alone
inside the round (:mod:`gateway.boundary`); a round that fails as a whole (the store is
down) is caught here: logged once per outage (:class:`gateway.boundary.Outage`), then
retried with backoff. ``CancelledError`` is never swallowed.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from gateway.boundary import Outage
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.notify import LoopName, Notifier

__all__ = ["MAX_IDLE_S", "Loop", "NextDue", "sleep_until"]

MAX_IDLE_S = 10.0


def sleep_until(due: datetime | None, now: datetime, *, interval_s: float, max_idle_s: float
                ) -> float:
    """Seconds an idle loop sleeps: until ``due``, at most ``max_idle_s``.

    ``due`` None (nothing scheduled) means ``max_idle_s``; ``due`` already past means work
    is waiting that this round could not take (a provider at its limit, a lease held
    elsewhere), so the loop looks again after ``interval_s``.
    """
    if due is None:
        return max_idle_s
    left = (due - now).total_seconds()
    if left <= 0:
        return interval_s
    return min(left, max_idle_s)


NextDue = Callable[[datetime], Awaitable[datetime | None]]
"""When a loop's next work falls due, given "now" (None: nothing is scheduled)."""


class Loop(ABC):
    """A background loop named ``name`` that the notifier can wake."""

    name: LoopName
    max_idle_s: float = MAX_IDLE_S
    #: When this loop's next work falls due (:mod:`gateway.store.due`), given "now";
    #: None: the loop has no such query and sleeps ``interval_s`` between rounds.
    next_due: NextDue | None = None

    def __init__(
        self, *, notifier: Notifier, interval_s: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._notifier = notifier
        self._clock = clock
        self._interval_s = interval_s
        self._stopping = asyncio.Event()
        self._outage = Outage(self.name, interval_s)

    @abstractmethod
    async def run_once(self) -> int:
        """Do one round of work; return how many items were handled."""

    async def idle_s(self) -> float:
        """Seconds to sleep after a round that found nothing to do (unless woken)."""
        if self.next_due is None:
            return self._interval_s
        now = self._clock.now()
        due = await self.next_due(now)
        return sleep_until(due, now, interval_s=self._interval_s, max_idle_s=self.max_idle_s)

    async def run(self) -> None:
        """Run rounds until :meth:`stop` is called."""
        while not self._stopping.is_set():
            wait_s = self._interval_s
            try:
                handled = await self.run_once()
                self._outage.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (the loop boundary: Outage logs it)
                wait_s = self._outage.failed(exc)
                handled = 0
            if handled == 0 and not self._stopping.is_set():
                if not self._outage.failures:
                    wait_s = await self._idle_or_interval()
                until = self._clock.now() + timedelta(seconds=wait_s)
                await self._notifier.sleep(self.name, wait_s, until)
            else:  # a busy loop still lets requests in (a SQLite call need not yield)
                await asyncio.sleep(0)

    async def _idle_or_interval(self) -> float:
        try:
            return await self.idle_s()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 (the store may be down: the next round tells)
            return self._interval_s

    def stop(self) -> None:
        """Ask the loop to finish its current round and return."""
        self._stopping.set()
        self._notifier.wake(self.name)
