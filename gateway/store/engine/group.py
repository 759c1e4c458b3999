"""Group commit: store calls that arrive together share one transaction.

A commit is the expensive part of a write (on SQLite one writer at a time, each commit
its own ``BEGIN IMMEDIATE`` and WAL write; on PostgreSQL a WAL flush), so
:class:`Group` queues the items of concurrent callers and a single flusher hands
everything queued to one ``run`` call (one transaction); the items that arrive while that
commit is in flight form the next group. No timer: a lone call is run at once, and a
group grows only while the store is busy (docs/benchmarks.md). Each caller is answered
only after its own item was committed.

A group whose ``run`` raises is run again item by item (``alone``), so one bad item
fails only its own caller. A caller that goes away does not cancel the commit of the
others.

A flusher cancelled before it answered its group (at shutdown) answers every caller of
that group not yet answered, and every caller queued behind it, with
:class:`contracts.errors.ServiceUnavailable` (503, retry): whether the group's commit
happened is not known, and only a commit seen to succeed is answered with its result
(docs/reliability.md, "Shutdown and the store").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from contracts.errors import ServiceUnavailable
from gateway.store.engine.aio import Connection, lifecycle_context

__all__ = ["Group", "update_rows"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class Group(Generic[T, R]):
    """Runs concurrent calls in groups (see the module docstring).

    Parameters
    ----------
    name : str
        For logs.
    run : callable
        ``run(items)`` stores a group in one transaction and returns one result per item,
        in order; a result that is an exception goes to its caller alone.
    alone : callable, optional
        ``alone(item)`` stores one item; used for every item of a group that raised.
        Default: ``run([item])``.
    max_items : int
        The largest group.
    key : callable, optional
        Items with the same key never share a group (they run one group after the other,
        in arrival order): e.g. two writes of one job.
    stopped : str
        The detail of the 503 its callers get when the flusher is cancelled before it
        answered them (see the module docstring).
    """

    def __init__(
        self,
        name: str,
        run: Callable[[list[T]], Awaitable[list[R | BaseException]]],
        *,
        alone: Callable[[T], Awaitable[R]] | None = None,
        max_items: int = 256,
        key: Callable[[T], Hashable] | None = None,
        stopped: str = "the gateway stopped before this write was known to be stored; retry",
    ) -> None:
        self._name = name
        self._run = run
        self._alone = alone
        self._max_items = max_items
        self._key = key
        self._stopped = stopped
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def __call__(self, item: T) -> R:
        """Store ``item`` with whatever else is queued; its result once committed."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(  # the lifecycle's: reserved connections
                self._flush(), name=f"{self._name}-group", context=lifecycle_context())
        return await asyncio.shield(future)

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        if self._key is None:
            group, self._queue = self._queue[: self._max_items], self._queue[self._max_items :]
            return group
        group, rest, seen = [], [], set()
        for queued in self._queue:
            k = self._key(queued[0])
            if k in seen or len(group) >= self._max_items:
                rest.append(queued)
            else:
                seen.add(k)
                group.append(queued)
        self._queue = rest
        return group

    @property
    def flusher(self) -> asyncio.Task[None] | None:
        """The task committing the queued items, if one was started (tests cancel it)."""
        return self._flusher

    async def _flush(self) -> None:
        group: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._queue:
                group = self._take()
                await self._commit(group)
        except asyncio.CancelledError:
            # Cancelled (at shutdown) before its group was answered: whether that group's
            # commit happened is not known, so no result - a 503 to retry; the callers
            # queued behind it, never begun, get the same answer rather than none.
            for _, future in [*group, *self._queue]:
                _settle(future, ServiceUnavailable(self._stopped))  # one each: raised apart
            self._queue = []
            raise

    async def _commit(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        items = [item for item, _ in group]
        try:
            results = await self._run(items)
        except Exception as exc:  # noqa: BLE001 (retried alone, or handed to its caller)
            if len(group) == 1 and self._alone is None:
                _settle(group[0][1], exc)
                return
            log.info(
                "group_retried_alone",
                extra={"group": self._name, "items": len(group), "error": type(exc).__name__},
            )
            await asyncio.gather(*(self._one(item, future) for item, future in group))
            return
        for (_, future), result in zip(group, results, strict=True):
            _settle(future, result)

    async def _one(self, item: T, future: asyncio.Future[R]) -> None:
        try:
            if self._alone is not None:
                result: R | BaseException = await self._alone(item)
            else:
                result = (await self._run([item]))[0]
        except Exception as exc:  # noqa: BLE001 (handed to the one caller it belongs to)
            result = exc
        _settle(future, result)


def _settle(future: asyncio.Future[R], result: R | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


Row = tuple[dict[str, Any], dict[str, Any]]
"""One row to update: ``({column: value} it must match, {column: new value})``."""


async def update_rows(conn: Connection, table: sa.Table, rows: Sequence[Row]) -> None:
    """Update many rows, each with its own values, in one ``UPDATE`` per shape (the set of
    columns matched and written), executed for all its rows at once. The written columns
    are bound under their own names (the ``SET`` clause follows the parameters' keys)."""
    shapes: defaultdict[tuple[tuple[str, ...], tuple[str, ...]], list[dict[str, Any]]]
    shapes = defaultdict(list)
    for match, values in rows:
        shape = (tuple(sorted(match)), tuple(sorted(values)))
        shapes[shape].append({**{f"w_{c}": v for c, v in match.items()}, **values})
    for (matched, _), params in shapes.items():
        await conn.execute(_update_where(table, matched), params)


@functools.lru_cache(maxsize=64)
def _update_where(table: sa.Table, matched: tuple[str, ...]) -> sa.Update:
    """``UPDATE table WHERE`` each ``matched`` column equals its ``w_`` parameter (built
    once per shape: building a statement costs more than SQLite running it)."""
    return table.update().where(*(table.c[c] == sa.bindparam(f"w_{c}") for c in matched))
