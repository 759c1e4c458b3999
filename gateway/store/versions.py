"""GET's version reads on SQLite: none while nothing changed, one statement for many.

An in-flight GET asks for a job's row version, tenant and arm (docs/lifecycle.md, "Reads
of a prediction"). On SQLite that was one primary-key ``SELECT`` per GET, on the event
loop thread; each one takes and releases the WAL's read lock, which is most of its cost
(docs/benchmarks.md). :class:`SqliteVersions` makes it cheaper two ways:

* **Known versions.** The database's change stamp
  (:meth:`gateway.store.reader.SqliteReads.stamp`: the WAL index header, rewritten by
  every commit of every process) is read first. The versions
  read since the stamp last changed are kept; while it stays the same, nothing was
  committed, so a kept version is the row's version now and is answered without a read.
  Any commit, of this process or another, forgets them all.
* **Batched reads.** The GETs that need a read in the same turn of the event loop wait
  for one ``SELECT ... WHERE id IN (...)`` made just after (``call_soon``), as PostgreSQL's
  reads are batched (:mod:`gateway.store.engine.pgreads`). A read never joins a statement
  already made: the statement runs after every GET of its batch arrived, so it sees every
  commit made before any of them asked.

A stamp is read before the statement it vouches for, so what the statement saw is at
least as new as the stamp; the versions it read are kept under that stamp.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["MAX_BATCH", "MAX_KNOWN", "Found", "Reads", "SqliteVersions"]

MAX_BATCH = 256
"""Ids in one statement at most; more go in the next, at once."""
MAX_KNOWN = 100_000
"""Versions kept between two commits at most; more are read but not kept."""

Found = tuple[tuple[int, Any], str, str]
"""``((row_version, updated_at), tenant, arm)`` of a job's row."""
_Waiting = dict[str, list["asyncio.Future[Found | None]"]]


class Reads(Protocol):
    """What :class:`SqliteVersions` reads through (:class:`gateway.store.reader.SqliteReads`)."""

    @property
    def available(self) -> bool: ...

    def stamp(self) -> bytes | None: ...

    def versions(self, job_ids: Sequence[str]) -> dict[str, Found] | None: ...


class SqliteVersions:
    """Known and batched version reads through ``reads`` (see the module docstring).

    Parameters
    ----------
    reads : Reads
        The process's lock-free SQLite reader (:class:`gateway.store.reader.SqliteReads`);
        when it cannot answer (not a SQLite file, the file busy), :meth:`read` answers
        None and the caller asks the engine.
    """

    def __init__(self, reads: Reads) -> None:
        self._reads = reads
        self._known: dict[str, Found] = {}
        self._known_at: bytes | None = None  # the stamp self._known was read under
        self._waiting: _Waiting = {}
        self._scheduled = False

    @property
    def available(self) -> bool:
        return self._reads.available

    def known(self, job_id: str) -> Found | None:
        """The version of ``job_id`` if it was read since the last commit of any
        process, else None (a read is needed)."""
        stamp = self._reads.stamp()
        if stamp is None or stamp != self._known_at:
            return None
        return self._known.get(job_id)

    async def read(self, job_id: str) -> tuple[Found | None] | None:
        """``(the version of job_id or None if there is no such job,)`` from the next
        batched statement, or None when the reader cannot answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Found | None] = loop.create_future()
        self._waiting.setdefault(job_id, []).append(future)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._read_waiting)
        try:
            return (await future,)
        except _CannotAnswer:
            return None

    def _read_waiting(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, {}
        ids = list(waiting)
        for start in range(0, len(ids), MAX_BATCH):
            chunk = ids[start:start + MAX_BATCH]
            stamp = self._reads.stamp()  # before the statement (module docstring)
            found = self._reads.versions(chunk)
            if found is not None and stamp is not None:
                self._keep(stamp, found)
            for job_id in chunk:
                _answer(waiting[job_id], found, job_id)

    def _keep(self, stamp: bytes, found: dict[str, Found]) -> None:
        if stamp != self._known_at:  # something was committed: what was kept may be old
            self._known = {}
            self._known_at = stamp
        if len(self._known) + len(found) <= MAX_KNOWN:
            self._known.update(found)


class _CannotAnswer(Exception):
    """The reader could not answer (the caller asks the engine)."""


def _answer(futures: list[asyncio.Future[Any]], found: dict[str, Found] | None,
            job_id: str) -> None:
    for future in futures:
        if future.done():  # its GET was cancelled meanwhile
            continue
        if found is None:
            future.set_exception(_CannotAnswer())
        else:
            future.set_result(found.get(job_id))
