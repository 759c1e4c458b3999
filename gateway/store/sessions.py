"""Console sessions in the store (the ``console_sessions`` table; docs/console.md).

Rows are keyed by the SHA-256 of the session id, so reading the table gives nobody a
session. A session ends ``idle_s`` after it was last used (:meth:`ConsoleSessions.find`
with ``touch``) or ``max_s`` after it was opened, whichever is first, and at once when
closed (sign-out). Every gateway process sharing the store sees the same sessions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store.engine.aio import Engine
from gateway.store.schema import console_sessions

__all__ = ["ConsoleSessions", "Session", "id_hash"]


def id_hash(session_id: str) -> str:
    """The stored form of a session id."""
    return hashlib.sha256(session_id.encode(errors="surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Session:
    """A live session: the admin token's digest, its CSRF token, when it ends."""

    token_digest: str
    csrf_token: str
    created_at: datetime
    seen_at: datetime
    expires_at: datetime


class ConsoleSessions:
    """Open, find and close console sessions.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    idle_s, max_s : float
        Seconds a session lives unused, and at most.
    """

    def __init__(self, engine: Engine, *, idle_s: float, max_s: float,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self._idle = timedelta(seconds=idle_s)
        self._max = timedelta(seconds=max_s)
        self._clock = clock

    async def open(self, session_id: str, *, token_digest: str, csrf_token: str) -> Session:
        """Store a new session (and drop the ended ones)."""
        now = self._clock.now()
        session = Session(token_digest, csrf_token, now, now, now + self._max)
        async with self._engine.begin() as conn:
            await conn.execute(console_sessions.delete().where(
                sa.or_(console_sessions.c.expires_at <= now,
                       console_sessions.c.seen_at <= now - self._idle)))
            await conn.execute(console_sessions.insert().values(
                id_hash=id_hash(session_id), token_digest=token_digest, csrf_token=csrf_token,
                created_at=now, seen_at=now, expires_at=session.expires_at))
        return session

    async def find(self, session_id: str, *, touch: bool) -> Session | None:
        """The live session of ``session_id``, or None (unknown, ended, closed); with
        ``touch`` its idle clock restarts (a page the person asked for, not a refresh)."""
        now = self._clock.now()
        key = id_hash(session_id)
        live = sa.and_(console_sessions.c.id_hash == key,
                       console_sessions.c.expires_at > now,
                       console_sessions.c.seen_at > now - self._idle)
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(console_sessions).where(live))).first()
        if row is None:
            return None
        if touch:
            async with self._engine.begin() as conn:
                await conn.execute(console_sessions.update().where(live).values(seen_at=now))
        return Session(row.token_digest, row.csrf_token, row.created_at,
                       now if touch else row.seen_at, row.expires_at)

    async def close(self, session_id: str) -> bool:
        """End a session now (sign-out); whether it existed."""
        query = console_sessions.delete().where(console_sessions.c.id_hash == id_hash(session_id))
        async with self._engine.begin() as conn:
            result = await conn.execute(query)
        return bool(result.rowcount)
