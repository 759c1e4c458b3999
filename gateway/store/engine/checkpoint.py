"""SQLite's WAL checkpoint on a worker thread, not in a commit on the event loop thread.

By default SQLite checkpoints automatically (``wal_autocheckpoint`` = 1,000 pages) inside
whichever commit pushes the WAL past 1,000 pages. In this process every SQLite write
commits on the event loop thread (:mod:`gateway.store.engine.inline`,
:mod:`gateway.store.engine.fastwrite`), so that commit took about 3.6 ms once every ~70 creates
and stalled every request meanwhile: it set the p99 of creates (docs/benchmarks.md,
"Shadow on the create path: the p99 tail is SQLite's WAL checkpoint").

:func:`install` turns the automatic checkpoint off (``PRAGMA wal_autocheckpoint=0``) on
the connections this process writes with on the loop (the engine's, the fast writes'),
and :class:`Checkpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)`` instead, on a
connection of its own in one worker thread: after a commit, when the WAL holds at least
``threshold_pages`` frames not yet copied into the database. A passive checkpoint takes
no lock a writer or reader waits for: commits go on while it copies. Never two run at
once, and the loop never waits for one. The signal is read after each commit from the
WAL index (the ``-shm`` file's header: ``mxFrame`` at byte 16, ``nBackfill`` at byte 96,
host byte order; https://www.sqlite.org/walformat.html, section 2.1), one ``pread`` of
about a microsecond; where that header cannot be read, a checkpoint runs every
``FALLBACK_COMMITS`` commits instead, and the first time that fallback starts one the
process logs the warning ``wal_index_unreadable`` (once per process: ``path``, ``reason``;
docs/logging.md), since from then on the WAL may grow well past the threshold between
checkpoints.

Durability does not depend on checkpoints: a commit is durable once its frames are in the
WAL file (a process crash loses none; with ``synchronous=NORMAL`` a power loss may lose
those since the WAL's last sync), and a later connection reads the WAL whatever was
copied (docs/storage.md, "The SQLite job store"). A checkpoint only bounds the WAL's size
and the readers' search in it.

Other processes on the same file (the CLI, other gateways) keep SQLite's defaults; their
automatic checkpoints and this one's serialize on SQLite's checkpoint lock. PostgreSQL
has nothing here (:func:`install` returns None).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import struct
import threading
import time
import weakref

from sqlalchemy import event

from gateway.store.engine.aio import Engine

__all__ = ["Checkpointer", "close", "for_engine", "for_file", "install"]

log = logging.getLogger(__name__)

THRESHOLD_PAGES = 1000
"""Frames (pages) not yet checkpointed that start a checkpoint: SQLite's own default."""
FALLBACK_COMMITS = 200
"""Commits between checkpoints when the WAL index cannot be read."""
MIN_INTERVAL_S = 0.01
"""At least this long between the end of one checkpoint and the start of the next: a WAL
that a reader keeps from being copied does not start a checkpoint after every commit."""
PASSES = 4
"""Passive checkpoints in a row at most, each copying what was committed during the last,
until one copies nothing new. A writer starts the WAL over from its first frame only if
its transaction began after every frame was copied; one that began during the only pass
would let the WAL file grow by another threshold each time (measured: 3,850 pages after
5,000 creates with one pass, under 1,100 with these)."""
_WALINDEX_VERSION = 3007000
_HEADER = struct.Struct("=I4xI?xHI")  # iVersion, iChange, isInit, szPage, mxFrame
_BACKFILL = struct.Struct("=I")  # nBackfill, at byte 96

_BY_ENGINE: weakref.WeakKeyDictionary[Engine, Checkpointer] = weakref.WeakKeyDictionary()
_warned = threading.Event()  # wal_index_unreadable logged by this process


def install(engine: Engine, threshold_pages: int = THRESHOLD_PAGES) -> Checkpointer | None:
    """Give ``engine`` (before it opens a connection) a :class:`Checkpointer`: automatic
    checkpoints off on its connections, a checkpoint considered after each commit.
    None (nothing done) unless it is a SQLite file. Its owner awaits :func:`close` after
    disposing of the engine."""
    url = engine.url
    if engine.dialect.name != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    assert url.database is not None
    checkpointer = Checkpointer(url.database, threshold_pages)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: object, _record: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine.sync_engine, "commit")
    def _on_commit(_connection: object) -> None:
        checkpointer.poke()

    _BY_ENGINE[engine] = checkpointer
    return checkpointer


def for_engine(engine: Engine) -> Checkpointer | None:
    """The :class:`Checkpointer` :func:`install` gave ``engine``, if any: the fast writes'
    connection turns its automatic checkpoint off too and pokes it after its commits."""
    return _BY_ENGINE.get(engine)


def for_file(path: str) -> Checkpointer | None:
    """The open :class:`Checkpointer` of the SQLite file ``path`` in this process, if any."""
    wanted = os.path.realpath(path)
    for checkpointer in list(_BY_ENGINE.values()):
        if not checkpointer.closed and os.path.realpath(checkpointer.path) == wanted:
            return checkpointer
    return None


async def close(engine: Engine) -> None:
    """Close ``engine``'s :class:`Checkpointer`, if it has one (after disposing of it)."""
    checkpointer = _BY_ENGINE.pop(engine, None)
    if checkpointer is not None:
        await checkpointer.aclose()


class Checkpointer:
    """Passive WAL checkpoints of the SQLite file ``path`` on one worker thread (module
    docstring). ``runs`` counts the checkpoints run, ``threads`` names the threads they
    ran on; ``last`` is the last one's ``(busy, wal frames, frames checkpointed)``."""

    def __init__(self, path: str, threshold_pages: int = THRESHOLD_PAGES) -> None:
        self._path = path
        self._threshold = threshold_pages
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "wal-checkpoint")
        self._running = False  # set before a checkpoint is submitted, cleared by it
        self._conn: sqlite3.Connection | None = None  # used on the worker thread only
        self._shm: int | None = None  # file descriptor of the -shm file
        self._commits = 0
        self._unreadable = ""  # why the WAL index could not be read, at the last commit
        self._not_before = 0.0
        self._closed = False
        self.runs = 0
        self.threads: set[str] = set()
        self.last: tuple[int, int, int] | None = None

    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def running(self) -> bool:
        """A checkpoint is submitted or running on the worker."""
        return self._running

    def poke(self) -> None:
        """After a commit, on the event loop thread: start a checkpoint on the worker if
        the WAL has grown past the threshold and none is running. Never waits."""
        if self._closed or self._running:
            return
        self._commits += 1
        pending = self._pending()
        if pending is None:
            if self._commits < FALLBACK_COMMITS:
                return
            self._warn_fallback()
        elif pending < self._threshold:
            return
        if time.monotonic() < self._not_before:
            return
        self._commits = 0
        # Set before the submit, not from its answer: the worker may finish (and clear it)
        # before submit() returns, and a finished future kept here stopped every later one.
        self._running = True
        self._executor.submit(self._checkpoint)

    def _pending(self) -> int | None:
        """Frames in the WAL not yet copied into the database, or None (unknown: the
        reason is kept for :meth:`_warn_fallback`)."""
        try:
            if self._shm is None:
                self._shm = os.open(self._path + "-shm", os.O_RDONLY)
            header = os.pread(self._shm, 100, 0)
        except OSError as exc:
            self._unreadable = f"cannot read {self._path}-shm: {exc.strerror or exc}"
            return None
        if len(header) < 100:
            self._unreadable = f"{self._path}-shm holds {len(header)} bytes, not a 100-byte header"
            return None
        version, _change, init, _page, frames = _HEADER.unpack_from(header, 0)
        if version != _WALINDEX_VERSION or not init:
            self._unreadable = (
                f"{self._path}-shm header: version {version} (expected {_WALINDEX_VERSION}), "
                f"isInit {int(init)}"
            )
            return None
        (backfilled,) = _BACKFILL.unpack_from(header, 96)
        return max(frames - backfilled, 0)

    def _warn_fallback(self) -> None:
        """The every-``FALLBACK_COMMITS`` checkpoint takes over: say why, once a process."""
        if _warned.is_set():
            return
        _warned.set()
        log.warning(
            "wal_index_unreadable",
            extra={"path": self._path, "reason": self._unreadable,
                   "fallback": f"a checkpoint every {FALLBACK_COMMITS} commits"},
        )

    def _checkpoint(self) -> None:
        """On the worker thread."""
        try:
            self.threads.add(threading.current_thread().name)
            if self._conn is None:
                self._conn = sqlite3.connect(
                    self._path, timeout=0, isolation_level=None, check_same_thread=False
                )
            for _ in range(PASSES):
                (row,) = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                done = self.last[2] if self.last else -1
                self.last = (int(row[0]), int(row[1]), int(row[2]))
                if row[0] or row[2] == done:
                    break  # busy, or nothing more to copy: the next writer starts the WAL over
            self.runs += 1
            self._reopen_shm_if_gone()
        except (sqlite3.Error, OSError) as exc:  # busy (another checkpoint): the next one tries
            log.debug("wal checkpoint of %s skipped: %s", self._path, exc)
        finally:
            self._not_before = time.monotonic() + MIN_INTERVAL_S
            self._running = False

    def _reopen_shm_if_gone(self) -> None:
        """The -shm file is unlinked when the last connection closes; ours keeps it, but
        one opened before ours may be stale: read the current file from then on."""
        fd = self._shm
        if fd is not None and os.fstat(fd).st_nlink == 0:
            self._shm = None
            os.close(fd)

    async def aclose(self) -> None:
        """Stop checkpointing, wait for a running checkpoint (on a thread, not the loop),
        run a last passive one and close the connection, on the worker."""
        if self._closed:
            return
        self._closed = True
        await asyncio.wrap_future(self._executor.submit(self._close))
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        """On the worker thread, after any running checkpoint (one thread, in order)."""
        self._checkpoint()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._shm is not None:
            os.close(self._shm)
            self._shm = None
