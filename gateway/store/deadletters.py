"""Dead-lettered outbox rows: read them, bring them back to ``pending``.

The SQL side of :class:`gateway.webhooks.deadletter.DeadLetters`. A row is named by its
outbox id (an ``int``) or its ``msg_...`` webhook id (a ``str``); a time window is
``[since, until)`` on ``created_at``. Rows come back as plain mappings of their columns
(``job_id`` among them: None for an operator webhook event, whose ``tenant`` is None too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store import deliveries
from gateway.store.engine.aio import Connection, Engine
from gateway.store.records import DeliveryStatus
from gateway.store.schema import endpoints, jobs
from gateway.store.schema import outbox as table

__all__ = ["DeadLetterRows", "Ref"]

Ref = int | str
"""An outbox id, or a ``msg_...`` webhook id."""

_FIELDS = {
    "id", "job_id", "msg_id", "event", "status", "url", "attempts", "created_at",
    "next_attempt_at", "last_attempt_at", "delivered_at", "last_status_code", "last_error",
}  # fmt: skip
_COLUMNS = [c for c in table.c if c.name in _FIELDS]


class DeadLetterRows:
    """Lists, shows and revives dead outbox rows.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    clock : Clock
        Injected time source (a revived row is due at "now").
    """

    def __init__(self, engine: Engine, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self._clock = clock

    async def list_dead(
        self, *, since: datetime | None, until: datetime | None, limit: int
    ) -> list[dict[str, Any]]:
        """Dead rows created in ``[since, until)``, newest first, without payloads, each
        with its prediction's ``tenant``."""
        query = (
            sa.select(*_COLUMNS, jobs.c.tenant)
            .outerjoin(jobs, jobs.c.id == table.c.job_id)
            .where(table.c.status == DeliveryStatus.DEAD, *_window(since, until))
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [dict(row._mapping) for row in await conn.execute(query)]

    async def find(self, ref: Ref) -> dict[str, Any] | None:
        """The row ``ref`` in any status, with its ``payload`` and its prediction's
        ``tenant``; None if there is none."""
        async with self._engine.connect() as conn:
            query = sa.select(table, jobs.c.tenant).outerjoin(jobs, jobs.c.id == table.c.job_id)
            row = (await conn.execute(query.where(_ref(ref)))).first()
        return None if row is None else dict(row._mapping)

    async def revive(self, ref: Ref) -> list[int]:
        """Put the row ``ref`` back to ``pending`` if it is dead; the ids revived."""
        async with self._engine.begin() as conn:
            return await self._revive(conn, [_ref(ref)])

    async def revive_range(self, *, since: datetime, until: datetime) -> list[int]:
        """Put every dead row created in ``[since, until)`` back to ``pending``."""
        async with self._engine.begin() as conn:
            return await self._revive(conn, _window(since, until))

    async def disabled_endpoints(self) -> list[dict[str, Any]]:
        """Endpoints disabled by a 410: ``url``, ``disabled_at``, ``reason``; newest first."""
        query = sa.select(endpoints).order_by(endpoints.c.disabled_at.desc())
        async with self._engine.connect() as conn:
            return [dict(row._mapping) for row in await conn.execute(query)]

    async def _revive(self, conn: Connection, where: list[Any]) -> list[int]:
        """Pending again, due now, attempts reset, same ``msg_id``; URLs re-enabled."""
        rows = (
            await conn.execute(
                table.update()
                .where(table.c.status == DeliveryStatus.DEAD, *where)
                .values(
                    status=DeliveryStatus.PENDING,
                    attempts=0,
                    next_attempt_at=self._clock.now(),
                    lease_owner=None,
                    leased_until=None,
                )
                .returning(table.c.id, table.c.url)
            )
        ).all()
        urls = {deliveries.endpoint_key(row.url) for row in rows}
        if urls:
            await conn.execute(endpoints.delete().where(endpoints.c.url.in_(urls)))
        return sorted(row.id for row in rows)


def _ref(ref: Ref) -> Any:
    return table.c.id == ref if isinstance(ref, int) else table.c.msg_id == ref


def _window(since: datetime | None, until: datetime | None) -> list[Any]:
    where = []
    if since is not None:
        where.append(table.c.created_at >= since)
    if until is not None:
        where.append(table.c.created_at < until)
    return where
