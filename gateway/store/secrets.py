"""Secrets the gateway generates once and keeps in the store (the ``secrets`` table)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store.engine.aio import Engine
from gateway.store.schema import secrets

__all__ = ["get_or_create"]


async def get_or_create(
    engine: Engine, name: str, generate: Callable[[], str], *, clock: Clock = SYSTEM_CLOCK
) -> str:
    """The secret stored under ``name``; the first caller stores ``generate()``.

    Every process sharing the store gets the same value, whichever process won the race
    to insert it.
    """
    query = sa.select(secrets.c.value).where(secrets.c.name == name)
    async with engine.connect() as conn:
        stored = (await conn.execute(query)).scalar()
    if stored is not None:
        return str(stored)
    with contextlib.suppress(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(
                secrets.insert().values(name=name, value=generate(), created_at=clock.now())
            )
    async with engine.connect() as conn:
        return str((await conn.execute(query)).scalar_one())
