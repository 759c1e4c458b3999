"""Databases for tests: SQLite files and PostgreSQL databases made for the test run.

PostgreSQL is the machine's server on 127.0.0.1:5432 (trust auth, user ``postgres``);
``CUTOVER_TEST_PG_URL`` overrides the admin URL. :func:`database_url_for` and
:func:`sync_database` create a database from nothing and drop it afterwards (used where
processes of their own share it); in-process tests share one migrated database per
session that :func:`reset_database` empties before each test (``tests/conftest.py``), so
tests never see each other's rows.

``CUTOVER_TEST_BACKENDS`` (default ``sqlite,postgres``) selects the backends. A test whose
point is the store's SQL runs on each of them (:data:`BACKENDS`, the ``every_backend``
marker); any other test runs on the first one only (:data:`DEFAULT_BACKENDS`), unless
``CUTOVER_TEST_EVERY_BACKEND=1`` runs every test on every backend (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKENDS",
    "EVERY_BACKEND",
    "PG_ADMIN_DSN",
    "database_url_for",
    "migrate",
    "pg_admin",
    "reset_database",
    "run_sync",
    "sync_database",
]

PG_ADMIN_DSN = os.environ.get("CUTOVER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = [b for b in os.environ.get("CUTOVER_TEST_BACKENDS", "sqlite,postgres").split(",") if b]
#: Every test on every backend (a nightly run), not only the ``every_backend`` ones.
EVERY_BACKEND = os.environ.get("CUTOVER_TEST_EVERY_BACKEND", "") not in ("", "0")
#: The backends of a test that does not exercise the store's SQL: the first selected one.
DEFAULT_BACKENDS = BACKENDS if EVERY_BACKEND else BACKENDS[:1]


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop
    (pytest may set up a sync fixture from an async one): on a fresh thread."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def pg_admin(statement: str) -> None:
    """Run one statement as the PostgreSQL admin user (on the admin database)."""
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
    await pg_admin(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name)
    finally:
        await pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def reset_database(url: str) -> None:
    """Empty every table of a migrated PostgreSQL database (keeps the schema)."""
    from gateway.store.schema import metadata

    names = ", ".join(f'"{table.name}"' for table in metadata.sorted_tables)
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await connection.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    finally:
        await connection.close()


async def migrate(url: str) -> None:
    """Apply the gateway's migrations to ``url``."""
    from gateway.store.engine import db

    engine = db.create_engine(url)
    try:
        await db.migrate(engine)
    finally:
        await engine.dispose()


@contextmanager
def sync_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """:func:`database_url_for` for synchronous fixtures."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'cutover.db'}"
        return
    name = f"cutover_test_{secrets.token_hex(6)}"
    run_sync(pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield _pg_url(name)
    finally:
        run_sync(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
