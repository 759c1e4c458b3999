"""The lease heartbeat of the provider events a round applies.

While :class:`gateway.intake.EventProcessor` applies a round's events (a terminal one
copies the outputs, which may take longer than a lease),
:meth:`gateway.store.events.ProviderEvents.holding` renews their leases every
``lease_s`` / :data:`RENEWALS_PER_LEASE` seconds through a :class:`Heartbeat`, so no other
process claims and applies them meanwhile. :class:`Repeat`, its timer, also renews a
job's lease while a poll or a synchronous submit applies its result
(:meth:`gateway.store.claims.Claims.applying`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta

import sqlalchemy as sa

from gateway.clock import Clock
from gateway.store.engine.aio import Engine
from gateway.store.records import ProviderEvent
from gateway.store.schema import provider_events

__all__ = ["RENEWALS_PER_LEASE", "Heartbeat", "Repeat"]

log = logging.getLogger("gateway.store.events")  # one logger for the events' leases

RENEWALS_PER_LEASE = 4  # a round's leases are renewed every lease_s / 4 while it applies


class Heartbeat:
    """Renews the leases of the events being applied until each is settled.

    ``held(ids)`` is the update of the rows of ``ids`` this process still holds
    (:meth:`gateway.store.events.ProviderEvents._held`).
    """

    def __init__(
        self, engine: Engine, held: Callable[[list[int]], sa.Update], *,
        lease_length: timedelta, clock: Clock,
    ) -> None:
        self._engine = engine
        self._held = held
        self._lease_length = lease_length
        self._clock = clock
        self._applying: dict[int, str] = {}  # event id -> job id, while a round applies it

    @contextlib.asynccontextmanager
    async def holding(self, events: Sequence[ProviderEvent]) -> AsyncIterator[None]:
        """See :meth:`gateway.store.events.ProviderEvents.holding`."""
        for event in events:
            self._applying[event.id] = event.job_id
        period_s = self._lease_length.total_seconds() / RENEWALS_PER_LEASE
        timer = Repeat(self._renew_applying, period_s, "provider_event_renewal_failed")
        try:
            yield
        finally:
            await timer.stop()
            for event in events:
                self._applying.pop(event.id, None)

    def settled(self, event_id: int) -> None:
        """The event was marked or released: its lease is renewed no more."""
        self._applying.pop(event_id, None)

    async def _renew_applying(self) -> None:
        applying = dict(self._applying)
        if not applying:
            return
        until = self._clock.now() + self._lease_length
        async with self._engine.begin() as conn:
            done = await conn.execute(
                self._held(sorted(applying)).values(leased_until=until)
                .returning(provider_events.c.id)
            )
            renewed = set(done.scalars())
        for event_id, job_id in applying.items():
            if event_id not in renewed and self._applying.pop(event_id, None) is not None:
                log.warning("provider_event_lease_lost", extra={"job_id": job_id})


class Repeat:
    """Runs ``work`` every ``period_s`` seconds until :meth:`stop` (a timer, so a round
    shorter than a period creates no task; a failure is logged as ``failure`` and the next
    period tries again)."""

    def __init__(
        self, work: Callable[[], Awaitable[None]], period_s: float, failure: str
    ) -> None:
        self._work = work
        self._period_s = period_s
        self._failure = failure
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(period_s, self._fire)
        self._task: asyncio.Task[None] | None = None

    def _fire(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._work()
        except Exception as exc:  # noqa: BLE001 (the store is down: the lease may run out)
            log.warning(self._failure, extra={"error": repr(exc)})
        if self._task is not None:  # not stopped meanwhile
            self._timer = self._loop.call_later(self._period_s, self._fire)

    async def stop(self) -> None:
        """Stop repeating; a run in progress ends first."""
        task, self._task = self._task, None
        if self._timer is not None:
            self._timer.cancel()
        if task is not None:
            await asyncio.wait({task})
