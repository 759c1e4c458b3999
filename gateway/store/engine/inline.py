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
  usual busy timeout (:data:`gateway.store.engine.db.SQLITE_BUSY_TIMEOUT_S`);
* a parameter is large (a provider webhook body carrying a file): its copy into SQLite
  grows with its size.

Calls never overlap: while one waits on its thread, the next one waits for it.

A call is made again only when its failed run changed nothing: no row (an
``executemany`` outside a transaction commits each row as it goes; made again, it
inserted the first rows twice) and no transaction begun or ended. The store's statements
all run inside ``BEGIN IMMEDIATE``, where the lock is met at the ``BEGIN`` (or, in a
rollback journal, at the ``COMMIT``), both made again safely.

The thread waits for the lock in slices of :data:`BUSY_SLICE_S` (SQLite's own wait
cannot be interrupted), so closing the connection while a call waits there (its caller
was cancelled, then SQLAlchemy closed or terminated the connection) ends the wait within
a slice; the close itself is left to the call once it has returned: closing the
connection under the running statement crashed the process. The same holds for a
statement running on the loop when ``stop()`` comes from another thread (SQLAlchemy
terminates a connection it finds unreferenced from whichever thread collects garbage).
The thread's outcome is
always retrieved, so a cancelled wait logs nothing (docs/storage.md, "A cancelled lock
wait").
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import aiosqlite

__all__ = ["InlineConnection", "connect"]

LARGE_PARAMETER_BYTES = 64 * 1024
BUSY_SLICE_S = 0.1  # a thread's wait for the lock, between two looks at whether to give up


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "database is locked" in str(exc)


def _state(conn: sqlite3.Connection) -> tuple[int, bool]:
    """What a call that failed must have left as it was to be made again: the rows
    changed so far (an ``executemany`` outside a transaction commits row by row) and
    whether a transaction is open (SQLite may roll one back on an error)."""
    return conn.total_changes, conn.in_transaction


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


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a thread call's outcome seen: its caller may have been cancelled."""
    if not future.cancelled():
        future.exception()


class InlineConnection(aiosqlite.Connection):
    """See the module docstring. ``busy_timeout_s``: how long a call that found the
    database locked waits for it, on a worker thread."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_timeout_s: float):
        super().__init__(connector, iter_chunk_size=64)
        self._busy_timeout_s = busy_timeout_s
        self._waiting: asyncio.Future[Any] | None = None
        # Between stop() (any thread) and a call (the loop, or its thread): whether a
        # statement runs now, so that stop() never closes the connection under it.
        self._lock = threading.Lock()
        self._in_call = False
        self._give_up = False  # set by close/stop: the call on the thread stops waiting
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
        if not _large(args):
            conn = self._begin_call()
            before = _state(conn)
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or _state(conn) != before:
                    raise
            finally:
                self._end_call()
        elif not self._running or self._connection is None:
            raise ValueError("Connection closed")
        self._give_up = False
        self._waiting = asyncio.ensure_future(asyncio.to_thread(self._patiently, fn, args, kwargs))
        self._waiting.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(self._waiting)
        finally:
            if self._waiting.done():
                self._waiting = None

    def _begin_call(self) -> sqlite3.Connection:
        """The connection, marked in use (on the loop or its thread) for :meth:`stop`."""
        with self._lock:
            if not self._running or self._connection is None:
                raise ValueError("Connection closed")
            self._in_call = True
            return self._connection

    def _end_call(self) -> None:
        with self._lock:
            self._in_call = False
            if not self._running:  # stopped while the call ran: the close was left to us
                self._close_now()

    def _patiently(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        conn = self._begin_call()
        deadline = time.monotonic() + self._busy_timeout_s
        try:
            while True:
                slice_s = min(BUSY_SLICE_S, deadline - time.monotonic())
                conn.execute(f"PRAGMA busy_timeout = {max(1, int(slice_s * 1000))}")
                before = _state(conn)
                try:
                    return fn(*args, **kwargs)
                except sqlite3.OperationalError as exc:
                    locked = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
                    if not locked or self._give_up or time.monotonic() >= deadline:
                        raise
                    if _state(conn) != before:  # partly done: not to be made again
                        raise
        finally:
            if self._running:  # still ours to use: stop() closes nothing during a call
                conn.execute("PRAGMA busy_timeout = 0")
            self._end_call()

    def _close_now(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def stop(self) -> None:
        with self._lock:
            self._running = False
            if self._in_call:  # closed by the call once it returns
                self._give_up = True
            else:
                self._close_now()

    async def close(self) -> None:
        self._give_up = True  # the wait is not wanted any more
        if self._waiting is not None:
            await asyncio.wait([self._waiting])
        self.stop()


def connect(path: str, busy_timeout_s: float) -> InlineConnection:
    """An :class:`InlineConnection` to the SQLite file ``path`` (not yet opened)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    return InlineConnection(connector, busy_timeout_s)
