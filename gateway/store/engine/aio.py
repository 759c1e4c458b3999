"""The store's asyncio engine: SQLAlchemy Core driven from the event loop, without
``sqlalchemy.ext.asyncio``.

Why this exists: the package ``sqlalchemy.ext.asyncio`` imports ``AsyncSession`` and with
it the whole ORM (``sqlalchemy.orm``), which the store never uses; that import was 8 %
of ``cutover serve``'s instructions to a listening socket (docs/benchmarks.md,
"Start-up"). The store needs only a small part of ``AsyncEngine``, which this module
provides the way ``sqlalchemy.ext.asyncio`` itself does:

* :func:`create_engine` builds a Core :class:`sqlalchemy.engine.Engine` as
  ``create_async_engine`` does: ``create_engine(url, _is_async=True)`` (the asyncio
  dialect of the URL, ``aiosqlite`` or ``asyncpg``, and its asyncio-adapted pool), with
  ``async_creator`` wrapped into the dialect's DBAPI ``connect``;
* every call that may do I/O (connect, begin, execute, commit or roll back, close,
  dispose) runs through ``sqlalchemy.util.concurrency.greenlet_spawn``, so the dialect's
  ``await_`` suspends it on the event loop;
* results come back buffered: both dialects fetch a statement's rows when it executes
  (no server-side cursors here), and the driver's cursor is closed before the result is
  returned, as ``AsyncConnection.execute`` does, so reading a
  :class:`sqlalchemy.engine.CursorResult` never waits.

It leans on names SQLAlchemy does not document as public: ``create_engine``'s
``_is_async`` argument, ``sqlalchemy.util.concurrency.greenlet_spawn`` and the adapted
cursor's ``_async_soft_close()`` (2.0.44 and later), so
``pyproject.toml`` pins SQLAlchemy to ``>=2.0.44,<2.2`` (tested with 2.1.9).
``tests/integration/test_store_aio.py`` runs what the store relies on, on SQLite and
PostgreSQL; the whole store suite runs through this module.

Usage (the subset of ``AsyncEngine``/``AsyncConnection`` the store uses, same names)::

    engine = create_engine("sqlite+aiosqlite:///cutover.db")
    async with engine.begin() as conn:          # one transaction, committed on success
        await conn.execute(table.insert().values(...))
    async with engine.connect() as conn:        # no transaction opened by us
        rows = (await conn.execute(select(...))).all()
    await engine.dispose()
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, CursorResult, Dialect, RootTransaction
from sqlalchemy.util.concurrency import greenlet_spawn

__all__ = ["LIFECYCLE", "Connection", "Engine", "create_engine", "lifecycle_context"]

LIFECYCLE: contextvars.ContextVar[bool] = contextvars.ContextVar("lifecycle", default=False)
"""True in the tasks of the job lifecycle (the background loops, group-commit flushes):
their checkouts may take every pooled connection, where the others (an HTTP request's
own reads) share all but the engine's ``reserved`` ones, so no read load can leave the
lifecycle waiting for a connection (docs/benchmarks.md, issue 23 item 3)."""
# The task holding a shared connection (its nested checkouts take no second one); a task
# it creates meanwhile inherits the value, not the connection: compared with the current task.
_HOLDS_SHARED: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "holds_shared", default=None)


def lifecycle_context() -> contextvars.Context:
    """A copy of the current context with :data:`LIFECYCLE` set: the ``context`` of a
    lifecycle task (``asyncio.create_task(coro, context=lifecycle_context())``)."""
    context = contextvars.copy_context()
    context.run(LIFECYCLE.set, True)
    return context

T = TypeVar("T")
if TYPE_CHECKING:  # SQLAlchemy 2.1 types rows with a TypeVarTuple, 2.0 with a TypeVar
    Result: TypeAlias = CursorResult[*tuple[Any, ...]]
    """What :meth:`Connection.execute` returns: a buffered Core result of any row shape."""


def create_engine(
    url: str | URL, *, async_creator: Callable[[], Any] | None = None, reserved: int = 0,
    **kw: Any,
) -> Engine:
    """An :class:`Engine` for an asyncio dialect's ``url`` (``sqlite+aiosqlite://``,
    ``postgresql+asyncpg://``); ``kw`` are :func:`sqlalchemy.create_engine`'s (pool size,
    timeouts, ``connect_args``). ``async_creator`` (no arguments, returns an awaitable of
    the driver's connection) replaces the driver's own ``connect``, as in
    ``create_async_engine``. ``reserved`` connections of ``pool_size`` are the
    lifecycle's (:data:`LIFECYCLE`): checkouts outside it hold at most ``pool_size -
    reserved`` at once. No connection is opened here.

    Raises :class:`sqlalchemy.exc.ArgumentError` for a URL SQLAlchemy cannot parse or
    whose dialect has no asyncio variant (``create_engine``'s own errors).
    """
    if async_creator is not None:

        def creator() -> Any:
            return sync_engine.dialect.dbapi.connect(  # type: ignore[union-attr]
                async_creator_fn=async_creator
            )

        kw["creator"] = creator
    sync_engine = sa.create_engine(url, _is_async=True, **kw)
    shared = kw.get("pool_size", 5) + kw.get("max_overflow", 10) - reserved if reserved else None
    return Engine(sync_engine, shared=shared, timeout_s=kw.get("pool_timeout", 30.0))


class Engine:
    """The process's engine (``AsyncEngine``'s part the store uses). ``sync_engine`` is
    the Core engine underneath: its events (``connect``, ``begin``, ``commit``) are where
    listeners go."""

    __slots__ = ("__weakref__", "_shared", "_timeout_s", "disposals", "shared", "sync_engine")

    def __init__(
        self, sync_engine: sa.Engine, *, shared: int | None = None, timeout_s: float = 30.0
    ) -> None:
        self.sync_engine = sync_engine
        self.disposals = 0  # dispose() calls so far: see Connection.close
        self.shared = shared
        """Connections that checkouts outside :data:`LIFECYCLE` may hold at once (None:
        no limit)."""
        self._shared = asyncio.Semaphore(shared) if shared is not None else None
        self._timeout_s = timeout_s

    async def _share(self) -> bool:
        """Wait for one of the shared connections unless this task may take any (the
        lifecycle's, or the task already holding a shared one: a nested checkout waiting
        for a second would deadlock; not a task it created, which inherits the context:
        request work of its own, maybe outliving the checkout); True when one was taken
        (give it back with :meth:`_unshare`). Raises :class:`sqlalchemy.exc.TimeoutError`
        (the pool's own error: the HTTP edge answers 503) after the pool's timeout."""
        if self._shared is None or LIFECYCLE.get():
            return False
        holder = _HOLDS_SHARED.get()
        if holder is not None and holder is asyncio.current_task():
            return False
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._shared.acquire()
        except TimeoutError:
            raise sa.exc.TimeoutError(
                f"no shared connection within {self._timeout_s} s (the rest are reserved "
                "for the job lifecycle)") from None
        return True

    def _unshare(self) -> None:
        assert self._shared is not None
        self._shared.release()

    async def take_shared(self) -> bool:
        """One of the shared connections for a pooled connection taken outside
        :class:`Connection` by request work (the batched GET reads of
        :mod:`gateway.store.engine.pgreads` keep one): as :meth:`_share`, True when one was
        taken; give it back with :meth:`give_shared`. Raises as :meth:`_share`."""
        return await self._share()

    def give_shared(self) -> None:
        """Give back what :meth:`take_shared` took (when it answered True)."""
        self._unshare()

    @property
    def dialect(self) -> Dialect:
        return self.sync_engine.dialect

    @property
    def url(self) -> URL:
        return self.sync_engine.url

    def connect(self) -> Connection:
        """A connection from the pool for ``async with``: no transaction is begun by
        this module (SQLAlchemy autobegins one at the first statement, as ever), and
        whatever is open is rolled back when the block ends."""
        return Connection(self)

    def read(self) -> Connection:
        """:meth:`connect` for single reads: on PostgreSQL the connection is in
        ``AUTOCOMMIT``, so a ``SELECT`` is one round trip (no ``BEGIN`` before it, no
        ``ROLLBACK`` after it; each statement sees the last commit, as under READ
        COMMITTED). Not for ``FOR UPDATE`` or transaction-scoped locks. On SQLite the same
        as :meth:`connect`."""
        return Connection(self, autocommit=self.sync_engine.dialect.name == "postgresql")

    def lifecycle_read(self) -> Connection:
        """:meth:`read` for a step of the job lifecycle made in a request's task (a
        provider webhook's URL check, the read of the job its event applies to): its
        checkout may take a connection reserved for the lifecycle, as under
        :data:`LIFECYCLE`, so no load of polling GETs holding the shared ones delays it
        (docs/lifecycle.md, "Reads and the lifecycle"). For short single reads only: each
        one takes a reserved connection for its duration."""
        return Connection(self, autocommit=self.sync_engine.dialect.name == "postgresql",
                          lifecycle=True)

    def begin(self, *, lifecycle: bool = False) -> _Begin:
        """A connection in a transaction for ``async with``: committed when the block
        ends normally, rolled back when it raises (``AsyncEngine.begin()``). With
        ``lifecycle``, a short write of the job lifecycle made in a request's task (a
        provider's unsigned webhook poke): its checkout may take a reserved connection,
        as :meth:`lifecycle_read`'s."""
        return _Begin(self, lifecycle=lifecycle)

    async def dispose(self) -> None:
        """Close the pool's connections; checked-out ones close when returned (a task
        still in a transaction at shutdown: a group flush, a lease renewal; SQLAlchemy
        would hand them back to the pool it replaced, where they stayed open)."""
        await greenlet_spawn(self.sync_engine.dispose)
        self.disposals += 1


class Connection:
    """One pooled connection (``AsyncConnection``'s part the store uses); entered with
    ``async with engine.connect()``. ``sync_connection`` is the Core connection."""

    __slots__ = ("_autocommit", "_disposals", "_holds", "_lifecycle", "_shared", "engine",
                 "sync_connection")

    def __init__(
        self, engine: Engine, *, autocommit: bool = False, lifecycle: bool = False
    ) -> None:
        self.engine = engine
        self.sync_connection: sa.Connection | None = None
        self._disposals = engine.disposals
        self._autocommit = autocommit
        self._lifecycle = lifecycle  # may take a reserved connection (Engine.lifecycle_read)
        self._shared = False
        self._holds: contextvars.Token[asyncio.Task[Any] | None] | None = None

    async def __aenter__(self) -> Connection:
        self._disposals = self.engine.disposals
        self._shared = False if self._lifecycle else await self.engine._share()
        if self._shared:  # this task's nested checkouts take no second one
            self._holds = _HOLDS_SHARED.set(asyncio.current_task())
        try:
            self.sync_connection = await greenlet_spawn(self.engine.sync_engine.connect)
            if self._autocommit:  # a flag of the driver's connection: no round trip
                self.sync_connection = await greenlet_spawn(
                    self.sync_connection.execution_options, isolation_level="AUTOCOMMIT"
                )
        except BaseException:
            self._unhold()
            if self.sync_connection is not None:  # taken, not handed over: given back
                await _run_to_completion(self.close())
            else:
                self._release()
            raise
        return self

    async def __aexit__(
        self, type_: type[BaseException] | None, value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._unhold()
        await _run_to_completion(self.close())

    def _unhold(self) -> None:
        """Reset :data:`_HOLDS_SHARED` in the task that set it (the close runs in a task
        of its own: see :func:`_run_to_completion`)."""
        holds, self._holds = self._holds, None
        if holds is not None:
            try:
                _HOLDS_SHARED.reset(holds)
            except ValueError:  # left in another task than it was entered in
                _HOLDS_SHARED.set(None)

    @property
    def dialect(self) -> Dialect:
        return self.engine.sync_engine.dialect

    def _sync(self) -> sa.Connection:
        if self.sync_connection is None:
            raise sa.exc.InvalidRequestError("the connection is not entered (async with)")
        return self.sync_connection

    def in_transaction(self) -> bool:
        return self._sync().in_transaction()

    async def execute(
        self, statement: sa.Executable, parameters: Any = None,
        execution_options: Any = None,
    ) -> Result:
        """``statement`` with ``parameters`` (a dict, or a list of dicts: executemany);
        the result is buffered (see the module docstring)."""
        result = await greenlet_spawn(
            self._sync().execute, statement, parameters, execution_options=execution_options
        )
        return await _buffered(result)

    async def exec_driver_sql(
        self, statement: str, parameters: Any = None, execution_options: Any = None
    ) -> Result:
        """A driver-level SQL string (the driver's parameter style), result buffered."""
        result = await greenlet_spawn(
            self._sync().exec_driver_sql, statement, parameters, execution_options
        )
        return await _buffered(result)

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(sync_connection, *args, **kw)`` with its I/O on the event loop (alembic's
        migrations, inspection)."""
        return await greenlet_spawn(fn, self._sync(), *args, **kw)

    async def close(self) -> None:
        """Roll back whatever is open and return the connection to the pool; closed
        instead when the engine was disposed of since it was taken (docs/reliability.md,
        "Shutdown and the store")."""
        try:
            if self.sync_connection is not None:
                if self._disposals != self.engine.disposals:
                    await greenlet_spawn(self.sync_connection.invalidate)
                await greenlet_spawn(self.sync_connection.close)
        finally:
            self._release()

    def _release(self) -> None:
        if self._shared:
            self._shared = False
            self.engine._unshare()


class _Begin:
    """``engine.begin()``: the connection, and its root transaction."""

    __slots__ = ("_connection", "_transaction")

    def __init__(self, engine: Engine, *, lifecycle: bool = False) -> None:
        self._connection = Connection(engine, lifecycle=lifecycle)
        self._transaction: RootTransaction | None = None

    async def __aenter__(self) -> Connection:
        conn = await self._connection.__aenter__()
        try:
            self._transaction = await greenlet_spawn(_enter_transaction, conn._sync())
        except BaseException:
            conn._unhold()
            await _run_to_completion(conn.close())
            raise
        return conn

    async def __aexit__(
        self, type_: type[BaseException] | None, value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._transaction is not None:  # commit, or roll back on an exception
                await greenlet_spawn(self._transaction.__exit__, type_, value, traceback)
        finally:
            self._connection._unhold()
            await _run_to_completion(self._connection.close())


def _enter_transaction(connection: sa.Connection) -> RootTransaction:
    return connection.begin().__enter__()


async def _buffered(result: Result) -> Result:
    """Close the driver's cursor of a result whose rows are already fetched (what
    ``sqlalchemy.ext.asyncio`` does before handing a result over: reading it later, off
    the greenlet, could not await the cursor's close)."""
    cursor = result.cursor
    if cursor is not None:
        await cursor._async_soft_close()
    return result


async def _run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Run a clean-up (a connection's close) to its end even when the caller is
    cancelled meanwhile; the cancellation is raised once it is done (as
    ``sqlalchemy.ext.asyncio`` closes connections: a close abandoned halfway could hand
    the connection back to a pool disposed of in between)."""
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as err:
            if task.done():
                raise
            cancelled = err
        else:
            break
    if cancelled is not None:
        raise cancelled
    return result
