"""Provider events: verified webhook bodies, stored once, applied in arrival order.

:class:`gateway.intake.Intake` adds a body after it was verified (deduplicated on its
SHA-256 per job); :class:`gateway.intake.EventProcessor` claims pending events with a
lease (:mod:`gateway.store.lease`) and marks each one processed when it was applied, or
releases it for a later retry; both only while it still holds the lease (a process whose
lease ran out must not settle an event another process now holds).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from contracts.errors import ServiceUnavailable
from gateway.store import lease
from gateway.store.schema import provider_events

__all__ = ["ProviderEvent", "ProviderEvents"]


@dataclass(frozen=True)
class ProviderEvent:
    """One stored provider webhook: ``body`` is the raw, verified request body."""

    id: int
    job_id: str
    provider: str
    body: bytes


_INLINE_BYTES = 64 * 1024


def _key(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class ProviderEvents(lease.Leasing):
    """Stores, claims and settles provider events.

    Constructed like :class:`gateway.store.lease.Leasing`.
    """

    async def add(self, job_id: str, provider: str, body: bytes) -> bool:
        """Store a verified body; True if it was new, False for a duplicate of the job's.

        Raises
        ------
        ServiceUnavailable
            The event could not be stored (answer 503 so the provider retries).
        """
        # Hashing megabytes would stall every other request: on a worker thread.
        if len(body) > _INLINE_BYTES:
            event_key = await asyncio.to_thread(_key, body)
        else:
            event_key = _key(body)
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    provider_events.insert().values(
                        job_id=job_id,
                        provider=provider,
                        event_key=event_key,
                        body=body,
                        received_at=self._clock.now(),
                    )
                )
        except IntegrityError:
            return False
        except SQLAlchemyError as exc:
            raise ServiceUnavailable("the event could not be stored; retry later") from exc
        return True

    async def claim(self, limit: int) -> list[ProviderEvent]:
        """Lease up to ``limit`` unprocessed events, oldest first."""
        now = self._clock.now()
        pending = (
            sa.select(provider_events.c.id)
            .where(provider_events.c.processed_at.is_(None), lease.unleased(provider_events, now))
            .order_by(provider_events.c.id)
            .limit(limit)
        )
        async with self._engine.begin() as conn:
            rows = await lease.claim(
                conn, provider_events, pending, owner=self._owner, until=now + self._lease_length
            )
        return [ProviderEvent(r.id, r.job_id, r.provider, r.body) for r in rows]

    async def mark_processed(self, event_id: int) -> bool:
        """Record that an event was applied (or refused) and release its lease; only if
        this process still holds the lease. True when it did."""
        return await self._settle(event_id, processed_at=self._clock.now(), leased_until=None)

    async def release(self, event_id: int, *, until: datetime) -> bool:
        """Give a held event back, not to be claimed again before ``until`` (a retry's
        backoff); only if this process still holds the lease. True when it did."""
        return await self._settle(event_id, leased_until=until)

    async def _settle(self, event_id: int, **values: object) -> bool:
        async with self._engine.begin() as conn:
            done = await conn.execute(
                provider_events.update()
                .where(
                    provider_events.c.id == event_id,
                    provider_events.c.lease_owner == self._owner,
                    provider_events.c.processed_at.is_(None),
                )
                .values(lease_owner=None, **values)
            )
        return bool(done.rowcount)
