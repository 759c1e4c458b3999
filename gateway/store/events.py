"""Provider events: verified webhook bodies, stored once, applied in arrival order.

:class:`gateway.intake.Intake` adds a body after it was verified (deduplicated on its
SHA-256 per job); :class:`gateway.intake.EventProcessor` claims pending events with a
lease (:mod:`gateway.store.lease`) and marks each one processed when it was applied.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    provider_events.insert().values(
                        job_id=job_id,
                        provider=provider,
                        event_key=hashlib.sha256(body).hexdigest(),
                        body=body,
                        received_at=self._clock(),
                    )
                )
        except IntegrityError:
            return False
        except SQLAlchemyError as exc:
            raise ServiceUnavailable("the event could not be stored; retry later") from exc
        return True

    async def claim(self, limit: int) -> list[ProviderEvent]:
        """Lease up to ``limit`` unprocessed events, oldest first."""
        now = self._clock()
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

    async def mark_processed(self, event_id: int) -> None:
        """Record that an event was applied (or refused) and release its lease."""
        async with self._engine.begin() as conn:
            await conn.execute(
                provider_events.update()
                .where(provider_events.c.id == event_id)
                .values(processed_at=self._clock(), lease_owner=None, leased_until=None)
            )
