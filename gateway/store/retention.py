"""Retention statements (docs/retention.md): each deletes or clears at most ``limit`` rows
found through an index, oldest first, so a pruning round never scans a large table.

* delivered outbox rows: ``ix_outbox_delivered_at``;
* applied provider events: ``ix_provider_events_processed_at_id``;
* finished predictions whose data is due for removal: ``ix_jobs_data_removed_completed_at``.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from contracts.job import TERMINAL_STATES
from gateway.store.engine.aio import Engine
from gateway.store.schema import assets, jobs, outbox, provider_events, shadow_comparisons

__all__ = ["RetentionStore"]

_FINISHED = sorted(TERMINAL_STATES)


class RetentionStore:
    """The pruning statements; every method is bounded by ``limit``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def prune_outbox(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` outbox rows delivered before ``before``."""
        oldest = (
            sa.select(outbox.c.id)
            .where(outbox.c.delivered_at.is_not(None), outbox.c.delivered_at < before)
            .order_by(outbox.c.delivered_at)
            .limit(limit)
        )
        return await self._delete(outbox, oldest)

    async def prune_events(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` provider events applied before ``before``."""
        oldest = (
            sa.select(provider_events.c.id)
            .where(
                provider_events.c.processed_at.is_not(None),
                provider_events.c.processed_at < before,
            )
            .order_by(provider_events.c.processed_at, provider_events.c.id)
            .limit(limit)
        )
        return await self._delete(provider_events, oldest)

    async def _delete(self, table: sa.Table, oldest: sa.Select[tuple[int]]) -> int:
        async with self._engine.begin() as conn:
            ids = list((await conn.execute(oldest)).scalars())
            if ids:
                await conn.execute(table.delete().where(table.c.id.in_(ids)))
        return len(ids)

    async def data_due(self, before: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` predictions finished before ``before`` whose inputs,
        outputs and logs are still kept."""
        query = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.data_removed.is_(False),
                jobs.c.completed_at.is_not(None),
                jobs.c.completed_at < before,
                jobs.c.state.in_(_FINISHED),
            )
            .order_by(jobs.c.completed_at)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return list((await conn.execute(query)).scalars())

    async def asset_keys(self, job_id: str) -> list[str]:
        """The owned files of one prediction (index ``ix_assets_job_id``)."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(sa.select(assets.c.key).where(assets.c.job_id == job_id))
            return list(rows.scalars())

    async def remove_data(self, job_id: str) -> bool:
        """Clear a finished prediction's input, output and logs, drop its asset rows and
        the comparisons of the shadow pairs it is part of (they quote its output), and
        mark it ``data_removed``; False when it was not due (already removed)."""
        async with self._engine.begin() as conn:
            done = await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.data_removed.is_(False))
                .values(input={}, output=None, raw_output=None, logs=None, data_removed=True)
            )
            if done.rowcount == 0:
                return False
            await conn.execute(assets.delete().where(assets.c.job_id == job_id))
            pairs = shadow_comparisons.c
            await conn.execute(shadow_comparisons.delete().where(
                sa.or_(pairs.shadow_id == job_id, pairs.primary_id == job_id)
            ))
        return True
