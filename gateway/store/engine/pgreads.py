"""Batched primary-key reads on PostgreSQL, straight through asyncpg (docs/benchmarks.md).

What an in-flight GET asks the store on every poll is small: a job's row version, tenant
and arm (:mod:`gateway.store.reader`). Through SQLAlchemy that read cost about 350 us of
the gateway's CPU (a pool checkout, the statement's compile cache, the execution context,
greenlet switches); through the driver it is one ``fetch`` of a statement asyncpg
prepared once. :class:`RowReads` keeps one connection of the engine's pool for itself
(taken on the first read, with the engine's own connect arguments and timeouts; one of
the shared connections, never the lifecycle's reserved ones: gateway/store/engine/aio.py)
and sends the reads that arrive while one is out together in the next: ``WHERE id =
ANY($1)``, one round trip for every GET waiting, so a thousand pollers cost a few queries,
not a thousand.

A read never joins a query already sent: it goes in the next one, so it sees every commit
made before it was asked (each statement runs in ``AUTOCOMMIT`` and sees the last commit),
which is what keeps a GET's answer from being older than a change its caller has seen.
When the connection fails the read answers None ("cannot answer": the caller asks the
engine, whose errors the HTTP edge turns into 503s) and the connection is dropped, to be
replaced on the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy.util.concurrency import greenlet_spawn

from gateway.store.engine.aio import Engine

__all__ = ["MAX_BATCH", "RowReads"]

MAX_BATCH = 500
"""Ids in one query at most; more wait for the next."""

_Waiting = dict[str, list["asyncio.Future[tuple[Any, ...] | None]"]]


class RowReads:
    """Reads of one fixed ``SELECT`` by id, batched (see the module docstring).

    Parameters
    ----------
    engine : Engine
        A PostgreSQL engine (``postgresql+asyncpg``): its pool gives the connection.
    sql : str
        The statement, with ``$1`` the array of ids (``text[]``); its first column must
        be the id.
    """

    def __init__(self, engine: Engine, sql: str) -> None:
        self._engine = engine
        self._sql = sql
        self._pooled: Any = None  # the pool's connection, held while this lives
        self._shares = False  # it holds one of the engine's shared connections (aio.py)
        self._waiting: _Waiting = {}
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    async def row(self, job_id: str) -> tuple[tuple[Any, ...] | None] | None:
        """``(the row of job_id or None,)``, or None when the read could not be made."""
        if self._closed:
            return None
        future: asyncio.Future[tuple[Any, ...] | None] = (
            asyncio.get_running_loop().create_future())
        self._waiting.setdefault(job_id, []).append(future)
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send())
        try:
            found = await future
        except _Unavailable:
            return None
        return (found,)

    async def _send(self) -> None:
        try:
            while self._waiting and not self._closed:
                ids = list(self._waiting)[:MAX_BATCH]
                batch = {job_id: self._waiting.pop(job_id) for job_id in ids}
                try:
                    rows = await self._fetch(ids)
                except Exception:  # noqa: BLE001 (any failure: the engine answers instead)
                    await self._drop()
                    _answer(batch, None, _Unavailable())
                    continue
                _answer(batch, {row[0]: tuple(row) for row in rows}, None)
        finally:
            self._sender = None
            if self._closed:
                _answer(self._waiting, None, _Unavailable())
                self._waiting = {}

    async def _fetch(self, ids: Sequence[str]) -> list[Any]:
        if self._pooled is None:
            # GETs' work: one of the shared connections, never the lifecycle's reserved ones
            self._shares = await self._engine.take_shared()
            try:
                self._pooled = await greenlet_spawn(self._engine.sync_engine.raw_connection)
            except BaseException:
                self._give_shared()
                raise
        driver = self._pooled.driver_connection
        rows: list[Any] = await driver.fetch(self._sql, ids)
        return rows

    async def _drop(self) -> None:
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            with contextlib.suppress(Exception):
                await greenlet_spawn(pooled.invalidate)
            self._give_shared()

    def _give_shared(self) -> None:
        if self._shares:
            self._shares = False
            self._engine.give_shared()

    async def close(self) -> None:
        """Give the connection back to the pool; later reads answer None."""
        self._closed = True
        if self._sender is not None:
            with contextlib.suppress(Exception):
                await self._sender
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            try:
                await greenlet_spawn(pooled.close)
            finally:
                self._give_shared()


class _Unavailable(Exception):
    """The read could not be made (the connection failed or the reader is closed)."""


def _answer(batch: _Waiting, rows: dict[str, tuple[Any, ...]] | None,
            error: Exception | None) -> None:
    for job_id, futures in batch.items():
        for future in futures:
            if future.done():  # its GET was cancelled meanwhile
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(rows.get(job_id) if rows is not None else None)
