"""The database engine: SQLite (WAL) by default, PostgreSQL through asyncpg.

One :class:`Engine` per process (:mod:`gateway.store.engine.aio`: SQLAlchemy Core on the event
loop, without ``sqlalchemy.ext.asyncio`` and the ORM it imports), created by
:func:`create_engine` and disposed by its owner. On SQLite every transaction starts with
``BEGIN IMMEDIATE`` so that concurrent writers queue on the busy timeout instead of
failing on a lock upgrade; on PostgreSQL claims use ``FOR UPDATE SKIP LOCKED`` (see
:mod:`gateway.store.jobs`).

:func:`migrate` brings a store to the migrations' head. Running the alembic migrations on
an empty SQLite file costs a cold start about a fifth of a second (importing alembic and
PostgreSQL's dialect, six revisions in batch mode), so ``sqlite_head.sql`` beside this
module holds what they leave behind: the ``CREATE`` statement of every table and index,
read back from ``sqlite_master`` of a database the migrations built, and the
``alembic_version`` row. :func:`create_at_head` runs it on a database that has no table
yet; every other store (an older revision, PostgreSQL) is migrated by alembic. The script
names the revision it was rendered at; a script behind the migrations' head is never
used (alembic runs instead), and ``tests/unit/test_fresh_sqlite_schema.py`` fails until
it is rendered again::

    .venv/bin/python -m gateway.store.engine.db > gateway/store/engine/sqlite_head.sql
"""

from __future__ import annotations

import asyncio
import re
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import engine as sa_engine
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from contracts.errors import ConfigurationError
from gateway.store.engine import aio, inline

__all__ = [
    "HEAD_SCRIPT",
    "Engine",
    "StoreError",
    "create_at_head",
    "create_engine",
    "dialect_insert",
    "head_revision",
    "head_script",
    "is_sqlite",
    "migrate",
    "missing_file",
    "render_head_script",
    "unreachable",
]

Engine = aio.Engine
"""The process's engine: created by the composition root, handed only to store classes."""
StoreError = SQLAlchemyError
"""The base of every error the database layer raises."""

_MIGRATIONS = Path(__file__).parents[1] / "migrations"
SQLITE_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 5.0
"""How long opening a PostgreSQL connection may take: a database that is away must make
requests fail fast (503), not hang them (docs/reliability.md, "Dependency outages")."""
PG_STATEMENT_TIMEOUT_S = 60.0
"""How long one PostgreSQL statement may wait for its answer (asyncpg's
``command_timeout``; ``[gateway] database_statement_timeout_s``): a connection whose peer
vanished without a reset (a partition, a failed-over host) answers never, and a write
waiting on it forever kept its job from finishing while other connections renewed the
job's lease (docs/reliability.md, "Dependency outages")."""
PG_PING_IDLE_S = 10.0
"""A pooled PostgreSQL connection unused for longer than this is pinged (``BEGIN``, ``;``,
``ROLLBACK``) before it is handed out; one used more recently is not (a ping on every
checkout was three of a GET's six round trips: docs/benchmarks.md). One the server
closed (a restart, ``pg_terminate_backend``, an idle reaper) is replaced without a ping:
the driver saw the close. One that vanished silently within this window fails its
statement, which invalidates it (docs/reliability.md, "Dependency outages")."""
PG_POOL_SIZE = 20
"""PostgreSQL connections of the process's pool, all kept open once made. It was 10 and
10 more "overflow" ones, each opened for a burst and closed when given back: under
1,000 polling callers a burst of GETs opened and closed connections all the time (a
server backend started for each), and a checkout waited up to 1.2 s for one, the job
lifecycle's too (docs/benchmarks.md, issue 23 item 3)."""
PG_POOL_RESERVED = 8
"""Of :data:`PG_POOL_SIZE`, the connections only the job lifecycle (the background loops
and group-commit flushes: :data:`gateway.store.engine.aio.LIFECYCLE`) may take: an HTTP
request's own reads hold at most the other 12, so no read load starves a webhook's apply
or the finalizer of a connection."""
# SQLSTATE classes and codes that mean "the server is not there for us right now":
# connection exceptions (08), shutdown or crash (57P01-57P03), too many connections (53300).
_UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")


def missing_file(database_url: str) -> Path | None:
    """The SQLite file ``database_url`` names when it does not exist yet (opening it
    would create it); None when it exists, or for PostgreSQL."""
    url = make_url(database_url)
    if url.drivername != "sqlite+aiosqlite" or not url.database:
        return None
    path = Path(url.database).expanduser()
    return None if path.exists() else path


def is_sqlite(engine: Engine) -> bool:
    """True when the engine talks to SQLite."""
    return engine.dialect.name == "sqlite"


def create_engine(
    database_url: str, *, statement_timeout_s: float | None = PG_STATEMENT_TIMEOUT_S
) -> Engine:
    """Build the process's engine for ``sqlite+aiosqlite://`` or ``postgresql+asyncpg://``.

    No connection is opened here. SQLite files get WAL mode, foreign keys, a 30 s busy
    timeout and ``BEGIN IMMEDIATE`` transactions; their parent directory is created.
    A PostgreSQL statement unanswered after ``statement_timeout_s`` (None: no limit) raises
    :class:`TimeoutError` (transient: :func:`unreachable`) and its connection is closed,
    not pooled again (:func:`_configure_postgresql`).

    Raises
    ------
    ConfigurationError
        For any other driver.
    """
    url = make_url(database_url)
    if url.drivername == "sqlite+aiosqlite":
        if url.database in (None, "", ":memory:"):  # it was SQLAlchemy's TypeError traceback
            raise ConfigurationError(
                f"database_url {database_url!r} names no file: the job store must outlive "
                "the process; use sqlite+aiosqlite:///PATH"
            )
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        # One connection: SQLite has one writer at a time, and queueing on the pool is
        # fair and prompt where SQLite's busy handler would sleep and retry.
        path = url.database or ":memory:"
        engine = aio.create_engine(
            url,
            # statements on the event loop thread, a locked database waited for on a
            # worker thread (gateway/store/engine/inline.py)
            async_creator=lambda: inline.connect(path, SQLITE_BUSY_TIMEOUT_S),
            pool_size=1,
            max_overflow=0,
            pool_timeout=SQLITE_BUSY_TIMEOUT_S,
        )
        _configure_sqlite(engine)
        return engine
    if url.drivername == "postgresql+asyncpg":
        engine = aio.create_engine(
            url, pool_size=PG_POOL_SIZE, max_overflow=0, reserved=PG_POOL_RESERVED,
            connect_args={"timeout": PG_CONNECT_TIMEOUT_S,
                          "command_timeout": statement_timeout_s},
        )
        _configure_postgresql(engine)
        return engine
    raise ConfigurationError(
        f"database_url driver {url.drivername!r} is not supported; "
        "use sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB"
    )


def dialect_insert(connection: sa_engine.Connection | aio.Connection) -> Callable[..., Any]:
    """The ``insert`` construct of ``connection``'s dialect (``on_conflict_do_*``).

    PostgreSQL's dialect is imported only when it is used: on SQLite it would add about
    85 ms to the gateway's start-up (docs/benchmarks.md)."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached at all (not that a statement
    failed): a refused, dropped or timed-out connection, a server shutting down, too many
    clients, the pool giving up. The HTTP edge answers those with 503 and ``Retry-After``.
    """
    if isinstance(exc, sa_exc.DBAPIError):
        orig = exc.orig
        state = str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")
        if exc.connection_invalidated or state.startswith(_UNREACHABLE_STATES):
            return True
        if isinstance(exc, sa_exc.InterfaceError):
            return True
        return isinstance(orig, OSError) or "unable to open database" in str(orig).lower()
    return isinstance(
        exc, sa_exc.TimeoutError | sa_exc.DisconnectionError | ConnectionError | TimeoutError
        | socket.gaierror,
    )


SQLITE_WRITE_PRAGMAS = ("PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON")
"""Set on every SQLite connection this process writes with (the engine's, and
:mod:`gateway.store.engine.fastwrite`'s), so both commit alike (docs/storage.md)."""


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        for pragma in SQLITE_WRITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: sa_engine.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _configure_postgresql(engine: Engine) -> None:
    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        # Raising DisconnectionError makes the pool replace the connection and try again.
        driver = getattr(dbapi_connection, "driver_connection", None)
        if driver is not None and driver.is_closed():
            raise sa_exc.DisconnectionError("the server closed the pooled connection")
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since <= PG_PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # any failure: the connection is not usable
            message = f"the idle pooled connection failed its ping: {exc}"
            raise sa_exc.DisconnectionError(message) from exc

    @event.listens_for(engine.sync_engine, "handle_error")
    def _on_error(context: sa_engine.ExceptionContext) -> None:
        # A statement past its command_timeout: the connection may be waiting on a dead
        # peer (asyncpg's cancel request too), so it is closed rather than reused.
        if isinstance(context.original_exception, TimeoutError):
            context.is_disconnect = True


async def migrate(engine: Engine, *, fresh_script: bool = True) -> None:
    """Apply every alembic migration up to head (idempotent; run at start).

    A store already at head is left alone without importing alembic at all (about a fifth
    of the gateway's start-up time): its ``alembic_version`` is compared with the head
    revision named by the migration files themselves. An empty SQLite database is
    created at head from one pre-rendered script instead of the migrations
    (:func:`create_at_head`; ``fresh_script=False`` runs the migrations anyway).
    """
    head = head_revision()
    if await _version(engine) == head:
        return
    async with engine.begin() as connection:
        if fresh_script and is_sqlite(engine):
            if await create_at_head(connection, head):
                return
        await connection.run_sync(_upgrade)


_REVISION_RE = re.compile(r'^(down_revision|revision)\s*=\s*"?([^"\n]*)"?\s*$', re.MULTILINE)


def head_revision() -> str | None:
    """The one revision of ``migrations/versions`` that no other revision follows."""
    revisions, parents = set(), set()
    for path in (_MIGRATIONS / "versions").glob("*.py"):
        fields = dict((name, value) for name, value in _REVISION_RE.findall(path.read_text()))
        if "revision" in fields:
            revisions.add(fields["revision"])
            parents.add(fields.get("down_revision"))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


async def _version(engine: Engine) -> str | None:
    """The store's ``alembic_version``, or None (no such table yet)."""
    try:
        async with engine.connect() as connection:
            rows = (await connection.exec_driver_sql("SELECT version_num FROM alembic_version"))
            versions = [row[0] for row in rows]
    except DBAPIError:
        return None
    return versions[0] if len(versions) == 1 else None


def _upgrade(connection: sa_engine.Connection) -> None:
    from alembic import command  # only when there is something to migrate
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


# --- a fresh SQLite store at head, from one pre-rendered script ------------------------

HEAD_SCRIPT = Path(__file__).with_name("sqlite_head.sql")
_REVISION_PREFIX = "-- alembic revision: "


def head_script(path: Path = HEAD_SCRIPT) -> tuple[str | None, list[str]]:
    """(the revision the script was rendered at, its statements in order); (None, [])
    when there is no script (an install without it migrates with alembic)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, []
    revision = None
    for line in text.splitlines():
        if line.startswith(_REVISION_PREFIX):
            revision = line.removeprefix(_REVISION_PREFIX).strip()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return revision, [s.strip() for s in body.split(";\n") if s.strip()]


async def create_at_head(connection: aio.Connection, head: str | None) -> bool:
    """Create the schema at ``head`` on ``connection`` (SQLite, inside its transaction)
    when the database has no table yet and the script is at ``head``; False (nothing
    done) otherwise, and the caller runs the migrations."""
    revision, statements = head_script()
    if head is None or revision != head:
        return False
    found = await connection.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    )
    if found.scalar_one() != 0:
        return False
    for statement in statements:
        await connection.exec_driver_sql(statement)
    return True


def render_head_script(path: Path) -> str:
    """The script for the SQLite database at ``path`` (migrated to its head)."""
    with sqlite3.connect(path) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    lines = [
        "-- The SQLite schema the alembic migrations build, rendered by",
        "-- `python -m gateway.store.engine.db`. Do not edit.",
        f"{_REVISION_PREFIX}{revision}",
    ]
    lines += [f"{sql};\n" for (sql,) in rows]
    row = f"INSERT INTO alembic_version (version_num) VALUES ('{revision}');"  # noqa: S608
    lines.append(row)  # (the revision id of the migration files, not an input)
    return "\n".join(lines) + "\n"


async def _migrated(path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await migrate(engine, fresh_script=False)
    finally:
        await engine.dispose()


def main() -> None:
    """Print the head script for the migrations' current head (``python -m
    gateway.store.engine.db > gateway/store/engine/sqlite_head.sql``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "head.db"
        asyncio.run(_migrated(path))
        sys.stdout.write(render_head_script(path))


if __name__ == "__main__":
    main()
