"""Outbox rows on their way out: claims and outcomes of webhook delivery attempts.

The SQL side of :class:`gateway.webhooks.delivery.Delivery`. A claim takes due, unleased
``pending`` rows with no earlier pending row of the same prediction (deliveries to one
prediction are sequential), oldest due first, and leases them (:mod:`gateway.store.lease`)
with their ``attempts`` already counting the attempt about to be made. Rows that must not
be sent are settled inside the claim instead: ``dead`` when their URL was disabled by a
410, ``superseded`` when they are non-terminal and the prediction's ``completed`` event
was delivered. An outcome is stored only while its sender still holds the lease.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from contracts.replicate import WebhookEvent
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store import lease
from gateway.store.engine import db
from gateway.store.engine.aio import Connection, Engine
from gateway.store.engine.fastwrite import FastWrites, SqliteConnection, sqlite_time
from gateway.store.engine.group import Group, update_rows
from gateway.store.reader import SqliteReads
from gateway.store.records import DeliveryStatus, OutboxRow
from gateway.store.schema import endpoints
from gateway.store.schema import outbox as table

__all__ = ["MAX_ENDPOINT_URL_CHARS", "Candidate", "DeliveryQueue", "endpoint_key"]

log = logging.getLogger(__name__)

MAX_ENDPOINT_URL_CHARS = 2048  # endpoints.url


@dataclass(frozen=True)
class Candidate:
    """A due row, before it is leased (what a fair-share choice needs to know)."""

    id: int
    url: str
    job_id: str


_DUE_SQL = (
    "SELECT 1 FROM outbox WHERE status = 'pending' AND next_attempt_at <= ?"
    " AND (leased_until IS NULL OR leased_until < ?) LIMIT 1"
)
# A row a claim would take now: _DUE_SQL's, and no earlier row of its job is pending.
_WAITING_SQL = (
    "SELECT 1 FROM outbox AS o WHERE o.status = 'pending' AND o.next_attempt_at <= ?"
    " AND (o.leased_until IS NULL OR o.leased_until < ?) AND NOT EXISTS (SELECT 1 FROM"
    " outbox AS e WHERE e.job_id = o.job_id AND e.id < o.id AND e.status = 'pending') LIMIT 1"
)

Pick = Callable[[list[Candidate], int], list[int]]
"""Chooses up to ``limit`` candidate ids to lease (oldest due first)."""


class DeliveryQueue(lease.Leasing):
    """Claims outbox rows for sending and records each attempt's outcome.

    Constructed like :class:`gateway.store.lease.Leasing`.
    """

    def __init__(
        self, engine: Engine, *, owner: str, lease_s: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(engine, owner=owner, lease_s=lease_s, clock=clock)
        self._reads = SqliteReads(engine)
        self._fast = FastWrites(engine)  # outcomes on SQLite (store/engine/fastwrite.py)
        self._outcomes: Group[tuple[int, dict[str, Any]], bool] = Group(
            "webhook-outcomes", self._record_group, max_items=256
        )

    async def claim(self, limit: int, pick: Pick) -> tuple[list[OutboxRow], int]:
        """Lease the rows ``pick`` chooses among up to ``4 * limit`` due ones.

        Returns the leased rows (by id) and how many rows were settled without sending.
        """
        now = self._clock.now()
        if self._reads.exists(_DUE_SQL, (now, now)) is False:
            return [], 0  # nothing due: no write transaction (SQLite, store/reader.py)
        async with self._engine.begin() as conn:
            # Over-fetch, so rows for hosts at their per-host limit can be passed over.
            picked = (await conn.execute(_DUE, {"now": now, "limit": limit * 4})).all()
            if not picked:
                return [], 0
            settled = await _settle_unsendable(conn, picked)
            candidates = [Candidate(r.id, r.url, r.job_id) for r in picked if r.id not in settled]
            rows = await lease.lease(
                conn,
                table,
                pick(candidates, limit),
                owner=self._owner,
                until=now + self._lease_length,
                attempts=table.c.attempts + 1,
                last_attempt_at=now,
            )
        return sorted((_outbox_row(r) for r in rows), key=lambda r: r.id), len(settled)

    async def waiting(self, now: datetime) -> bool:
        """Whether a claim would take a row at ``now``: pending, due, unleased, and no
        earlier row of its prediction pending (it may be one a claim settles unsent)."""
        found = self._reads.exists(_WAITING_SQL, (now, now))
        if found is not None:
            return found
        async with self._engine.read() as conn:
            return (await conn.execute(_WAITING, {"now": now})).first() is not None

    async def give_back(self, ids: list[int]) -> int:
        """Give back rows leased to this process whose first attempt, counted when they
        were written (:mod:`gateway.store.handoff`), was never made: unleased, their
        attempt uncounted, due as they were. Only rows this process still holds. Returns
        how many; 0 when the store fails (their leases run out instead)."""
        try:
            async with self._engine.begin() as conn:
                done = await conn.execute(
                    self._held(ids).values(
                        lease_owner=None, leased_until=None, attempts=table.c.attempts - 1,
                        last_attempt_at=None,
                    )
                )
        except SQLAlchemyError:
            log.warning("webhook_rows_not_given_back", extra={"rows": len(ids)})
            return 0
        return int(done.rowcount)

    async def record(
        self,
        row_id: int,
        *,
        status: DeliveryStatus,
        next_attempt_at: datetime | None,
        status_code: int | None,
        error: str | None,
        now: datetime,
        disable_url: str | None = None,
    ) -> bool:
        """Store an attempt's outcome if this process still holds the row; True if it did.

        Outcomes recorded together share one transaction (:mod:`gateway.store.engine.group`).
        With ``disable_url`` (a 410 Gone), the URL is disabled and its other pending,
        unleased rows go ``dead`` in the same transaction.
        """
        values: dict[str, Any] = {
            "status": status,
            "next_attempt_at": next_attempt_at,
            "last_status_code": status_code,
            "last_error": error,
            "lease_owner": None,
            "leased_until": None,
        }
        if status == DeliveryStatus.DELIVERED:
            values["delivered_at"] = now
        if disable_url is None:
            return await self._outcomes((row_id, values))
        async with self._engine.begin() as conn:
            done = await conn.execute(self._held([row_id]).values(**values))
            await _disable(conn, disable_url, now)
        return bool(done.rowcount)

    async def _record_group(
        self, group: list[tuple[int, dict[str, Any]]]
    ) -> list[bool | BaseException]:
        fast = self._fast.run(lambda conn: _record_fast(conn, group, self._owner))
        if fast is not None:
            return list(fast)
        async with self._engine.begin() as conn:
            ids = [row_id for row_id, _ in group]
            held_rows = sa.select(table.c.id).where(
                table.c.id.in_(ids),
                table.c.lease_owner == self._owner,
                table.c.status == DeliveryStatus.PENDING,
            )
            held_rows = held_rows.order_by(table.c.id).with_for_update()  # one lock order
            held = set((await conn.execute(held_rows)).scalars())
            outcomes = [({"id": row_id}, values) for row_id, values in group if row_id in held]
            await update_rows(conn, table, outcomes)
        return [row_id in held for row_id, _ in group]

    def _held(self, ids: list[int]) -> sa.Update:
        """The rows ``ids`` while this process holds them (pending, leased here)."""
        return table.update().where(
            table.c.id.in_(ids),
            table.c.lease_owner == self._owner,
            table.c.status == DeliveryStatus.PENDING,
        )


def _record_fast(
    conn: SqliteConnection, group: list[tuple[int, dict[str, Any]]], owner: str
) -> list[bool]:
    """:meth:`DeliveryQueue._record_group` on ``sqlite3`` (:mod:`gateway.store.engine.fastwrite`):
    each row updated while this process holds it."""
    held = []
    for row_id, values in group:
        names = sorted(values)
        sql = "UPDATE outbox SET {} WHERE id = ? AND lease_owner = ? AND status = 'pending'"
        bound = [_sqlite_value(values[name]) for name in names]
        done = conn.execute(
            sql.format(", ".join(f"{name} = ?" for name in names)), (*bound, row_id, owner)
        )
        held.append(done.rowcount == 1)
    return held


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return sqlite_time(value)
    return str(value) if isinstance(value, str) else value


def _outbox_row(row: sa.Row[Any]) -> OutboxRow:
    return OutboxRow(row.id, row.job_id, row.msg_id, row.event, row.url, row.payload, row.attempts)


def endpoint_key(url: str) -> str:
    """How ``endpoints`` remembers a URL: as written, or ``sha256:<hex>`` of it when it is
    longer than the column (:data:`MAX_ENDPOINT_URL_CHARS`), so a 410 from any URL holds."""
    if len(url) <= MAX_ENDPOINT_URL_CHARS:
        return url
    return "sha256:" + hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()


async def _long_url_reasons(conn: Connection, picked: Sequence[sa.Row[Any]]) -> dict[str, str]:
    """Disabled reasons of picked rows whose URL is too long to match ``endpoints`` in SQL."""
    keys = {endpoint_key(r.url) for r in picked if len(r.url) > MAX_ENDPOINT_URL_CHARS}
    if not keys:
        return {}
    query = sa.select(endpoints.c.url, endpoints.c.reason).where(endpoints.c.url.in_(keys))
    return {row.url: row.reason for row in await conn.execute(query)}


async def _settle_unsendable(conn: Connection, picked: Sequence[sa.Row[Any]]) -> set[int]:
    settled: set[int] = set()
    long_urls = await _long_url_reasons(conn, picked)
    for row in picked:
        disabled = row.disabled_reason or long_urls.get(endpoint_key(row.url))
        if disabled is not None:
            status, error = DeliveryStatus.DEAD, f"not sent: {disabled}"
        elif row.event != WebhookEvent.COMPLETED and row.completed_sent:
            status, error = DeliveryStatus.SUPERSEDED, "not sent: the completed event was delivered"
        else:
            continue
        await conn.execute(
            table.update()
            .where(table.c.id == row.id)
            .values(status=status, last_error=error, next_attempt_at=None)
        )
        settled.add(row.id)
        log.info(
            "webhook_not_sent",
            extra={"job_id": row.job_id, "msg_id": row.msg_id, "status": status},
        )
    return settled


def _claimable(now: sa.BindParameter[datetime]) -> list[sa.ColumnElement[bool]]:
    """Due, unleased, pending, and no earlier pending row of its job."""
    earlier = table.alias("earlier")
    blocked = sa.exists().where(
        earlier.c.job_id == table.c.job_id,
        earlier.c.id < table.c.id,
        earlier.c.status == DeliveryStatus.PENDING,
    )
    return [
        table.c.status == DeliveryStatus.PENDING,
        table.c.next_attempt_at <= now,
        lease.unleased(table, now),
        ~blocked,
    ]


def _due() -> sa.Select[Any]:
    """Claimable rows (:func:`_claimable`), oldest due first (bound: ``now``, ``limit``;
    built once)."""
    now: sa.BindParameter[datetime] = sa.bindparam("now", type_=table.c.next_attempt_at.type)
    done = table.alias("done")
    completed_sent = sa.exists().where(
        done.c.job_id == table.c.job_id,
        done.c.event == WebhookEvent.COMPLETED,
        done.c.status == DeliveryStatus.DELIVERED,
    )
    disabled = sa.select(endpoints.c.reason).where(endpoints.c.url == table.c.url)
    return (
        sa.select(
            table.c.id,
            table.c.url,
            table.c.job_id,
            table.c.msg_id,
            table.c.event,
            disabled.scalar_subquery().label("disabled_reason"),
            completed_sent.label("completed_sent"),
        )
        .where(*_claimable(now))
        .order_by(table.c.next_attempt_at, table.c.id)
        .limit(sa.bindparam("limit", type_=sa.Integer))
        .with_for_update(skip_locked=True, of=table)
    )


_DUE = _due()
_WAITING = (
    sa.select(table.c.id)
    .where(*_claimable(sa.bindparam("now", type_=table.c.next_attempt_at.type)))
    .limit(1)
)


async def _disable(conn: Connection, url: str, now: datetime) -> None:
    """Disable ``url`` (410 Gone) and kill its other pending, unleased rows."""
    reason = f"the endpoint answered 410 Gone at {now.isoformat()}"
    insert = db.dialect_insert(conn)
    await conn.execute(
        insert(endpoints)
        .values(url=endpoint_key(url), disabled_at=now, reason=reason)
        .on_conflict_do_nothing(index_elements=[endpoints.c.url])
    )
    await conn.execute(
        table.update()
        .where(
            table.c.url == url,
            table.c.status == DeliveryStatus.PENDING,
            lease.unleased(table, now),
        )
        .values(status=DeliveryStatus.DEAD, last_error=f"not sent: {reason}", next_attempt_at=None)
    )
