"""The hottest write transactions on SQLite, through the standard library's ``sqlite3``.

SQLAlchemy's async engine costs about 165 us of CPU for a transaction and 100 us for each
statement in it, where ``sqlite3`` does the same in 6 us (docs/benchmarks.md). Three
transactions run for every completion: storing a provider event
(:mod:`gateway.store.events`), marking events processed, and recording webhook outcomes
(:mod:`gateway.store.deliveries`). On a SQLite file they run here instead: fixed SQL on a
second connection of this process, begun (``BEGIN IMMEDIATE``), executed and committed
in one synchronous call on the event loop thread, so nothing else of this process runs
in between.

:meth:`FastWrites.run` answers None when it cannot run the transaction, and the caller
uses the engine instead:

* not a SQLite file (PostgreSQL, ``:memory:``);
* the database is locked: by another process, or by this process's engine connection in
  the middle of a transaction waiting on a worker thread (a large value, a locked
  database; :mod:`gateway.store.engine.inline`). The busy timeout here is 0: never a wait on
  the loop;
* any ``sqlite3`` error inside (rolled back first): the engine's run raises it the way
  SQLAlchemy wraps it, which is what callers handle;
* a listener watches the engine's statements (``before_cursor_execute`` or
  ``after_cursor_execute``: tracing, the tests' fault injection), which statements run
  here would bypass.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from gateway.store.engine import checkpoint, db
from gateway.store.engine.aio import Engine

__all__ = ["Compiled", "FastWrites", "SqliteConnection", "bound", "in_list", "result_processor",
           "sqlite_time"]

T = TypeVar("T")
SqliteConnection = sqlite3.Connection
"""The connection a :meth:`FastWrites.run` transaction gets (repositories name it as this)."""


def sqlite_time(at: datetime | None) -> str | None:
    """``at`` (timezone-aware) as SQLAlchemy's SQLite DATETIME stores it: UTC, microseconds."""
    if at is None:
        return None
    if at.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class FastWrites:
    """Runs short write transactions on a SQLite file through ``sqlite3`` (module docstring).

    Parameters
    ----------
    engine : Engine
        The process's engine: its database is written to, and its statements' listeners
        are checked before each run.
    """

    def __init__(self, engine: Engine) -> None:
        url = engine.url
        is_file = engine.dialect.name == "sqlite" and url.database not in (None, "", ":memory:")
        self._path: str | None = url.database if is_file else None
        self._dispatch = engine.sync_engine.dispatch
        self._conn: sqlite3.Connection | None = None
        # the WAL checkpoint off the loop thread, when the process has one (store/checkpoint.py)
        self._checkpointer = checkpoint.for_engine(engine)

    @property
    def available(self) -> bool:
        """Whether :meth:`run` may run here at all (a SQLite file): False on PostgreSQL and
        ``:memory:``, where it always answers None."""
        return self._path is not None

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """``work(conn)`` in one transaction, committed; None when it could not run here
        (nothing was written: the caller uses the engine)."""
        watched = self._dispatch.before_cursor_execute or self._dispatch.after_cursor_execute
        if self._path is None or watched:
            return None
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            return None  # locked, or not there: the engine waits or raises
        try:
            result = work(conn)
            conn.execute("COMMIT")
            if self._checkpointer is not None:
                self._checkpointer.poke()
        except sqlite3.Error:
            self._rollback(conn)
            return None
        except BaseException:
            self._rollback(conn)
            raise
        return result

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            assert self._path is not None
            conn = sqlite3.connect(
                self._path, timeout=0, isolation_level=None, check_same_thread=False,
                cached_statements=64,
            )
            for pragma in db.SQLITE_WRITE_PRAGMAS:  # as the engine's
                conn.execute(pragma)
            if self._checkpointer is not None:  # it checkpoints on its thread instead
                conn.execute("PRAGMA wal_autocheckpoint=0")
            self._conn = conn
        return self._conn

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def close(self) -> None:
        """Close the connection (a later run opens it again)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def in_list(count: int) -> str:
    """``?, ?, ...``: ``count`` placeholders for an ``IN (...)``."""
    return ", ".join("?" * count)


def bound(table: sa.Table, dialect: sa.Dialect, names: Sequence[str],
          values: dict[str, Any]) -> list[Any]:
    """``values`` of ``table``'s columns ``names``, in that order, as SQLAlchemy binds
    them on ``dialect``: each column type's own bind processor (JSON as text, datetimes
    as SQLite's strings), so a row written here is the row the engine would write."""
    out = []
    for name in names:
        process = _bind_processor(table, dialect, name)
        value = values[name]
        out.append(value if process is None else process(value))
    return out


@functools.lru_cache(maxsize=256)
def _bind_processor(table: sa.Table, dialect: sa.Dialect, name: str
                    ) -> Callable[[Any], Any] | None:
    return table.c[name].type.dialect_impl(dialect).bind_processor(dialect)


def result_processor(table: sa.Table, dialect: sa.Dialect, name: str
                     ) -> Callable[[Any], Any] | None:
    """How SQLAlchemy converts a stored value of ``table``'s column ``name`` on ``dialect``
    (a SQLite DATETIME string -> an aware UTC ``datetime``), or None when it does not."""
    return _result_processor(table, dialect, name)


@functools.lru_cache(maxsize=64)
def _result_processor(table: sa.Table, dialect: sa.Dialect, name: str
                      ) -> Callable[[Any], Any] | None:
    return table.c[name].type.dialect_impl(dialect).result_processor(dialect, None)


_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


class Compiled:
    """A statement built once with SQLAlchemy, run on a :meth:`FastWrites.run` connection:
    the engine's own SQL for ``dialect`` (compiled once), its parameters bound in order
    by each parameter type's bind processor, an expanding ``IN`` (a list: the constants
    of ``in_(...)``, or one bound at execution) as one ``?`` per item. So a statement the
    engine path also runs is written once, and both paths run the same SQL.

    Parameters
    ----------
    statement : sa.Executable
        The statement (its bind parameters named, those bound at execution without a value).
    dialect : sa.Dialect
        The engine's dialect (SQLite, ``qmark``).
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self._sql = compiled.string
        names = compiled.positiontup or []
        self._params = [
            (name, bind.expanding, bind.value,
             bind.type.dialect_impl(dialect).bind_processor(dialect))
            for name in names for bind in (compiled.binds[name],)
        ]
        self._sized: dict[tuple[tuple[str, int], ...], str] = {}

    def __call__(self, conn: sqlite3.Connection, values: dict[str, Any]) -> sqlite3.Cursor:
        """Execute with ``values`` (by parameter name; the statement's own values for the
        others)."""
        params: list[Any] = []
        sizes: dict[str, int] = {}
        for name, expanding, default, process in self._params:
            value = values.get(name, default)
            if expanding:
                items = list(value or ())
                if not items:
                    raise ValueError(f"an empty list for {name!r}")
                sizes[name] = len(items)
                params += items if process is None else [process(item) for item in items]
            else:
                params.append(value if process is None else process(value))
        return conn.execute(self._sql_for(sizes), params)

    def _sql_for(self, sizes: dict[str, int]) -> str:
        key = tuple(sorted(sizes.items()))
        sql = self._sized.get(key)
        if sql is None:
            sql = _POSTCOMPILE.sub(lambda m: in_list(sizes[m.group(1)]), self._sql)
            if len(self._sized) >= 512:  # one per list length: bounded all the same
                self._sized.clear()
            self._sized[key] = sql
        return sql
