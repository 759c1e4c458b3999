"""One lease claim for every work table (jobs, provider events, outbox rows).

A claim picks due rows and gives them to one process until a time: on PostgreSQL the
candidates are locked with ``FOR UPDATE SKIP LOCKED`` so concurrent claimers pass each
other by; on SQLite the claim's ``BEGIN IMMEDIATE`` transaction serialises writers
(:mod:`gateway.store.engine.db`). A row whose holder died is claimable again once
``leased_until`` has passed. The holder is named by :func:`process_owner`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store.engine.aio import Connection, Engine
from gateway.store.schema import jobs, outbox, provider_events

__all__ = ["OWNER_CHARS", "Leasing", "claim", "lease", "owner_id", "process_owner",
           "release_rows", "unleased"]

log = logging.getLogger(__name__)

# The longest lease owner the store keeps (PostgreSQL refuses a longer one; SQLite does not).
OWNER_CHARS = min(
    cast(sa.String, t.c.lease_owner.type).length or 0 for t in (jobs, provider_events, outbox)
)
_TAIL = 17  # a pod name's "-<replicaset hash>-<pod hash>", its unique part
_HASH = 6  # hex digits of the whole host name's SHA-256


def owner_id(host: str, pid: int, nonce: str) -> str:
    """The lease owner ``host:pid:nonce``, at most :data:`OWNER_CHARS` characters: a host
    name too long for that keeps its start and its last 17 characters, with 6 hex digits
    of the whole name's SHA-256 between them (docs/lifecycle.md, "Lease owners")."""
    rest = f":{pid}:{nonce}"
    room = OWNER_CHARS - len(rest)
    if len(host) > room:
        digest = hashlib.sha256(host.encode("utf-8", "surrogateescape")).hexdigest()[:_HASH]
        host = f"{host[:room - _TAIL - _HASH - 2]}~{digest}~{host[-_TAIL:]}"
    return host + rest  # room >= 44 (a 10-digit pid, 8 hex digits): the host keeps 19+


def process_owner() -> str:
    """A new lease owner for this process's gateway (:func:`owner_id` of the host name,
    the pid and 8 random hex digits: unique between containers that share a host name
    and run as pid 1, and between two gateways of one process), logged at INFO as
    ``lease_owner`` with the whole host name, so that an operator can tell which pod
    holds a lease."""
    host, pid = socket.gethostname(), os.getpid()
    owner = owner_id(host, pid, secrets.token_hex(4))
    log.info("lease_owner", extra={"owner": owner, "host": host, "pid": pid})
    return owner


class Leasing:
    """Base of the store classes that lease rows to this process.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    owner : str
        This process's lease owner id.
    lease_s : float
        How long a claim holds a row before another process may take it, in seconds.
    clock : Clock
        Injected time source.
    """

    def __init__(
        self, engine: Engine, *, owner: str, lease_s: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._engine = engine
        self._owner = owner
        self._lease_length = timedelta(seconds=lease_s)
        self._clock = clock


def unleased(
    table: sa.Table, now: datetime | sa.BindParameter[datetime]
) -> sa.ColumnElement[bool]:
    """Rows nobody holds at ``now`` (never leased, or the lease ran out; ``now`` may be
    bound at execution, in a statement built once)."""
    return sa.or_(table.c.leased_until.is_(None), table.c.leased_until < now)


async def lease(
    conn: Connection,
    table: sa.Table,
    ids: Sequence[Any],
    *,
    owner: str,
    until: datetime,
    **values: Any,
) -> list[sa.Row[Any]]:
    """Give the rows ``ids`` to ``owner`` until ``until`` (and set ``values``).

    Returns the updated rows in the order of ``ids``.
    """
    if not ids:
        return []
    rows = await conn.execute(
        table.update()
        .where(table.c.id.in_(ids))
        .values(lease_owner=owner, leased_until=until, **values)
        .returning(*table.c)
    )
    order = {row_id: n for n, row_id in enumerate(ids)}
    return sorted(rows, key=lambda row: order[row.id])


async def claim(
    conn: Connection, table: sa.Table, due: sa.Select[Any], *, owner: str, until: datetime,
    **values: Any,
) -> list[sa.Row[Any]]:
    """Lock the ids ``due`` selects (skipping locked rows) and :func:`lease` them (setting
    ``values`` too)."""
    ids = list((await conn.execute(due.with_for_update(skip_locked=True))).scalars())
    return await lease(conn, table, ids, owner=owner, until=until, **values)


async def release_rows(
    store: Leasing, table: sa.Table, due: Mapping[Any, datetime | None], *, states: Sequence[str]
) -> None:
    """Drop ``store``'s leases of several rows (id -> ``next_attempt_at``) of ``table`` still
    in one of ``states``, in one transaction (an executemany). ``updated_at`` is left alone:
    handing a row back changes nothing it holds (the poller's unchanged polls)."""
    if not due:
        return
    # No IN (...) of bound values: executemany cannot expand them, so the states are inlined.
    in_state = sa.or_(*(table.c.state == sa.literal_column(f"'{s}'") for s in states))
    statement = (
        table.update()
        .where(table.c.id == sa.bindparam("b_id"), table.c.lease_owner == store._owner, in_state)
        .values(lease_owner=None, leased_until=None, next_attempt_at=sa.bindparam("b_due"))
    )
    async with store._engine.begin() as conn:
        await conn.execute(statement, [{"b_id": i, "b_due": t} for i, t in due.items()])
