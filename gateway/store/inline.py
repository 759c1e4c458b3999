"""aiosqlite's connection, with its statements run on the event loop thread.

aiosqlite runs every call (cursor, execute, fetch, close, commit) on a thread of its own
and hands the result back to the event loop: four hand-offs for one statement, each a
wait for the GIL while the loop is busy. On this project's 2-core CI machine under load
that made one ``INSERT`` transaction cost about 4.7 ms against 40 us for the standard
library's ``sqlite3`` (docs/benchmarks.md), so the store, not the gateway, set the pace
of creates, submits and completions. :class:`InlineConnection` keeps aiosqlite's API (so
SQLAlchemy's ``sqlite+aiosqlite`` dialect drives it unchanged) and runs each call at once,
where a WAL-mode statement costs microseconds. Two cases go to a worker thread instead,
so the event loop never stalls:

* the database is locked by another process (``SQLITE_BUSY``: the connection's busy
  timeout is 0 on the loop): the call is made again on a thread, which waits up to the
  usual busy timeout (:data:`gateway.store.db.SQLITE_BUSY_TIMEOUT_S`);
* a parameter is large (a provider webhook body carrying a file): its copy into SQLite
  grows with its size.

Calls never overlap: while one waits on its thread, the next one waits for it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import aiosqlite

__all__ = ["InlineConnection", "connect"]

LARGE_PARAMETER_BYTES = 64 * 1024


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "database is locked" in str(exc)


def _large(args: tuple[Any, ...]) -> bool:
    """Whether a call's parameters carry a large value (``execute(sql, params)``)."""
    if len(args) < 2:
        return False
    params = args[1]
    values = params.values() if isinstance(params, dict) else params
    if not isinstance(values, list | tuple | type({}.values())):
        return False
    return any(
        isinstance(v, bytes | str | memoryview) and len(v) > LARGE_PARAMETER_BYTES for v in values
    )


class _AtOnce:
    """Stands in for aiosqlite's queue to its thread: SQLAlchemy's dialect puts a call
    on it directly (to set the isolation level); it runs the call at once."""

    def put_nowait(self, item: tuple[asyncio.Future[Any] | None, Callable[[], Any]]) -> None:
        future, function = item
        try:
            result = function()
        except Exception as exc:  # noqa: BLE001 (handed to the caller's future)
            if future is not None:
                future.set_exception(exc)
            return
        if future is not None:
            future.set_result(result)


class InlineConnection(aiosqlite.Connection):
    """See the module docstring. ``busy_timeout_s``: how long a call that found the
    database locked waits for it, on a worker thread."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_timeout_s: float):
        super().__init__(connector, iter_chunk_size=64)
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._waiting: asyncio.Future[Any] | None = None
        self._tx = _AtOnce()  # type: ignore[assignment]

    def __await__(self):
        return self._connect().__await__()  # no thread to start

    async def _connect(self) -> InlineConnection:
        if self._connection is None:
            self._connection = self._connector()
            self._connection.execute("PRAGMA busy_timeout = 0")
        return self

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._waiting is not None:  # a call on a thread: keep the calls in order
            await asyncio.wait([self._waiting])
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")
        if not _large(args):
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
        self._waiting = asyncio.ensure_future(asyncio.to_thread(self._patiently, fn, args, kwargs))
        try:
            return await asyncio.shield(self._waiting)
        finally:
            if self._waiting.done():
                self._waiting = None

    def _patiently(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        try:
            return fn(*args, **kwargs)
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    def stop(self) -> None:
        self._running = False
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def close(self) -> None:
        if self._waiting is not None:
            await asyncio.wait([self._waiting])
        self.stop()


def connect(path: str, busy_timeout_s: float) -> InlineConnection:
    """An :class:`InlineConnection` to the SQLite file ``path`` (not yet opened)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    return InlineConnection(connector, busy_timeout_s)
