"""Throwaway databases for tests: a SQLite file, or a fresh PostgreSQL database.

PostgreSQL is the machine's server on 127.0.0.1:5432 (trust auth, user ``postgres``);
``CUTOVER_TEST_PG_URL`` overrides the admin URL. Each test gets its own database,
created from nothing and dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import asyncpg

__all__ = ["BACKENDS", "PG_ADMIN_DSN", "database_url_for", "sync_database"]

PG_ADMIN_DSN = os.environ.get("CUTOVER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = [b for b in os.environ.get("CUTOVER_TEST_BACKENDS", "sqlite,postgres").split(",") if b]


async def _admin(statement: str) -> None:
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


def _pg_url(name: str) -> str:
    host_part = PG_ADMIN_DSN.split("://", 1)[1].rsplit("/", 1)[0]
    return f"postgresql+asyncpg://{host_part}/{name}"


@asynccontextmanager
async def database_url_for(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A SQLAlchemy URL of an empty database of ``backend`` (``sqlite`` or ``postgres``)."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'cutover.db'}"
        return
    name = f"cutover_test_{secrets.token_hex(6)}"
    await _admin(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name)
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def sync_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """:func:`database_url_for` for synchronous fixtures."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'cutover.db'}"
        return
    name = f"cutover_test_{secrets.token_hex(6)}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield _pg_url(name)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
