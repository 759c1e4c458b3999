"""Outbox rows handed straight to this process's deliverer, in memory.

A ``completed`` row is usually sent by the process that wrote it. Instead of committing
it unleased, waking the delivery loop and claiming it back in a second transaction, the
transaction that writes the row (:meth:`gateway.store.outbox.Planner.write_many`) leases
it to this process with its first attempt counted, exactly as a claim
(:meth:`gateway.store.deliveries.DeliveryQueue.claim`) would, and once that transaction
has committed the row goes to the deliverer in memory (docs/webhooks.md, "Several
replicas, restarts"). The durable row is written first: a process that dies before
sending it leaves a leased row, which any process sends once the lease has run out; one
that stops gracefully gives back a row committed after its deliverer stopped
(:meth:`gateway.webhooks.delivery.Delivery.release_unsent`).

A row is handed over only when a claim would take it now: no other ``pending`` row of its
prediction remains (deliveries to one prediction are sequential), its URL was not
disabled by a 410, and the deliverer has a free slot for its host
(:meth:`Deliverer.reserve`). Any other row is written unleased, for the delivery loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa

from contracts.replicate import WebhookEvent
from gateway.store.deliveries import endpoint_key
from gateway.store.engine.aio import Connection
from gateway.store.records import DeliveryStatus, OutboxRow
from gateway.store.schema import endpoints, outbox

__all__ = ["Deliverer", "Handed", "Handoff"]

_JOBS: sa.BindParameter[list[str]] = sa.bindparam("jobs", expanding=True)
_URLS: sa.BindParameter[list[str]] = sa.bindparam("urls", expanding=True)
# What keeps a new row from going at once, in one statement: the jobs that still have a
# pending row (sent or retried one at a time), and the URLs a 410 disabled.
_BLOCKERS = sa.union_all(
    sa.select(sa.literal("job").label("kind"), outbox.c.job_id.label("key")).where(
        outbox.c.job_id.in_(_JOBS), outbox.c.status == DeliveryStatus.PENDING
    ),
    sa.select(sa.literal("url"), endpoints.c.url).where(endpoints.c.url.in_(_URLS)),
)


class Deliverer(Protocol):
    """The deliverer's side (:class:`gateway.webhooks.delivery.Delivery`)."""

    def reserve(self, url: str) -> bool:
        """Take a slot for a row to ``url``, if one is free now."""

    def unreserve(self, url: str) -> None:
        """Give back a slot :meth:`reserve` took for a row that was not written."""

    def hand(self, rows: list[OutboxRow]) -> None:
        """Send rows written leased to this process (each holds a reserved slot)."""


@dataclass
class Handed:
    """The rows (outbox values, ``id`` included once inserted) one transaction leased to
    this process; :meth:`Handoff.settle` them after it ends."""

    rows: list[dict[str, Any]] = field(default_factory=list)


class Handoff:
    """Leases new ``completed`` rows to this process and hands them to ``deliverer``.

    Parameters
    ----------
    deliverer : Deliverer
        This process's delivery loop.
    owner : str
        Its lease owner id (the :class:`gateway.store.deliveries.DeliveryQueue`'s).
    lease_s : float
        Its lease length, in seconds.
    """

    def __init__(self, deliverer: Deliverer, *, owner: str, lease_s: float) -> None:
        self._deliverer = deliverer
        self._owner = owner
        self._lease = timedelta(seconds=lease_s)

    async def lease(
        self, conn: Connection, rows: list[dict[str, Any]], now: datetime, handed: Handed
    ) -> list[dict[str, Any]]:
        """Lease the rows (outbox values, about to be inserted by ``conn``'s transaction)
        that can go at once; return those, now with their lease. Every row gets the
        lease columns, so that all are inserted by one statement."""
        for row in rows:
            row.update(lease_owner=None, leased_until=None, last_attempt_at=None)
        wanted = [r for r in rows if r["event"] == WebhookEvent.COMPLETED]
        if not wanted:
            return []
        params = {
            "jobs": sorted({r["job_id"] for r in wanted}),
            "urls": sorted({endpoint_key(str(r["url"])) for r in wanted}),
        }
        blocked = {(kind, key) for kind, key in await conn.execute(_BLOCKERS, params)}
        leased = []
        for row in wanted:
            url = str(row["url"])
            if ("job", row["job_id"]) in blocked or ("url", endpoint_key(url)) in blocked:
                continue
            if not self._deliverer.reserve(url):
                continue
            row.update(
                lease_owner=self._owner, leased_until=now + self._lease,
                attempts=1, last_attempt_at=now,
            )
            leased.append(row)
        handed.rows += leased
        return leased

    def settle(self, handed: Handed, *, committed: bool) -> None:
        """After the transaction: send what it committed, or free the slots it took."""
        rows, handed.rows = handed.rows, []
        if not committed:
            for row in rows:
                self._deliverer.unreserve(str(row["url"]))
            return
        self._deliverer.hand([
            OutboxRow(r["id"], r["job_id"], r["msg_id"], str(r["event"]), r["url"], r["payload"], 1)
            for r in rows
        ])
