"""Fault injection for the lifecycle tests (issue 6): transient store errors raised by the
database driver itself, a condition wait, and a thread recorder for event-loop checks.

:class:`StoreFaults` hooks ``before_cursor_execute`` of an engine and raises, from the
chosen statements, the error the driver would raise: SQLite's "database is locked", or
on PostgreSQL a deadlock (SQLSTATE 40P01) or a dropped connection. SQLAlchemy wraps it as
it wraps a real one, so the code under test sees exactly what an outage looks like.
"""

from __future__ import annotations

import io
import random
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event

from gateway.store.engine.aio import Engine
from tests.support.gateway import GatewayHarness

__all__ = [
    "Statement",
    "StoreFaults",
    "ThreadLog",
    "all_due",
    "engine_of",
    "event_rows",
    "loop_named",
    "observe_large",
    "transient_error",
]

Statement = Callable[[str, dict[str, Any]], bool]


def engine_of(gateway: GatewayHarness) -> Engine:
    """The engine of the app under test (the one place tests reach for it)."""
    return gateway.store.engine


def loop_named(gateway: GatewayHarness, name: str) -> Any:
    """The app's background loop called ``name`` (``dispatcher``, ``events``...)."""
    from gateway.app import LOOPS

    return next(loop for loop in gateway.app[LOOPS] if loop.name == name)


async def all_due(gateway: GatewayHarness, *job_ids: str) -> bool:
    """Whether every job in ``job_ids`` is submitted and due for its next check."""
    import sqlalchemy as sa

    from gateway.store.schema import jobs

    query = sa.select(jobs.c.next_attempt_at).where(jobs.c.id.in_(job_ids))
    async with engine_of(gateway).connect() as conn:
        due = list((await conn.execute(query)).scalars())
    now = datetime.now(UTC)
    return len(due) == len(job_ids) and all(d is not None and d <= now for d in due)


async def event_rows(gateway: GatewayHarness) -> list[Any]:
    """Every stored provider event, by id."""
    import sqlalchemy as sa

    from gateway.store.schema import provider_events

    query = sa.select(provider_events).order_by(provider_events.c.id)
    async with engine_of(gateway).connect() as conn:
        return list((await conn.execute(query)).all())


async def observe_large(gateway: GatewayHarness, job_id: str, state: Any, **fields: Any) -> None:
    """:func:`tests.support.outbox.observe` for bodies of megabytes (streamed, so the
    test client does not warn), then one round of the events loop until idle."""
    provider, token = await gateway.store.callback_token(job_id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(job_id, state, **fields)
    response = await gateway.client.post(
        f"/provider-webhooks/{provider}/{job_id}/{token}",
        data=io.BytesIO(body),
        headers={**gateway.fake.sign(body), "Content-Length": str(len(body))},
    )
    assert response.status == 200, await response.text()
    while await loop_named(gateway, "events").run_once():
        pass


def transient_error(dialect: Any, n: int = 0) -> Exception:
    """A driver-level error that passes on retry: SQLite's lock, PostgreSQL's deadlock
    (even ``n``) or dropped connection (odd ``n``)."""
    dbapi = dialect.loaded_dbapi
    if dialect.name == "sqlite":
        return dbapi.OperationalError("database is locked")
    import asyncpg

    if n % 2 == 0:
        return dbapi.Error("deadlock detected", asyncpg.exceptions.DeadlockDetectedError("x"))
    return dbapi.InterfaceError("connection is closed")


def sql(pattern: str, **params: Any) -> Statement:
    """Statements matching ``pattern`` (a regex, searched) whose bound ``params`` match."""
    compiled = re.compile(pattern, re.IGNORECASE | re.DOTALL)

    def match(statement: str, bound: dict[str, Any]) -> bool:
        if not compiled.search(statement):
            return False
        return all(bound.get(k) == v for k, v in params.items())

    return match


class StoreFaults:
    """Raise transient driver errors from chosen statements of ``engine``.

    ``fail(match, times)`` fails the next ``times`` statements ``match`` accepts;
    ``outage()`` fails every statement until ``restore()``; ``chaos(rate, rng)`` fails
    each statement with probability ``rate``. ``raised`` counts the errors raised.
    """

    def __init__(self, engine: Engine) -> None:
        self._sync = engine.sync_engine
        self._rules: list[list[Any]] = []
        self._down = False
        self._rate = 0.0
        self._rng = random.Random(0)
        self.raised = 0
        self.seen: list[str] = []

    def fail(self, match: Statement, times: int = 1) -> StoreFaults:
        self._rules.append([match, times])
        return self

    def outage(self) -> None:
        self._down = True

    def restore(self) -> None:
        self._down = False
        self._rate = 0.0
        self._rules.clear()

    def chaos(self, rate: float, rng: random.Random) -> None:
        self._rate, self._rng = rate, rng

    def __enter__(self) -> StoreFaults:
        event.listen(self._sync, "before_cursor_execute", self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self._sync, "before_cursor_execute", self._hook)

    def _hook(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        compiled = getattr(context, "compiled_parameters", None)
        bound = dict(compiled[0]) if compiled else {}
        if self._should_fail(statement, bound):
            self.raised += 1
            self.seen.append(statement.split("\n", 1)[0][:80])
            raise transient_error(conn.dialect, self.raised)

    def _should_fail(self, statement: str, bound: dict[str, Any]) -> bool:
        if self._down:
            return True
        for rule in self._rules:
            if rule[1] > 0 and rule[0](statement, bound):
                rule[1] -= 1
                return True
        if statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            return False
        return self._rate > 0 and self._rng.random() < self._rate


class ThreadLog:
    """Records which thread ran a wrapped function (for "off the event loop" checks)."""

    def __init__(self) -> None:
        self.on_loop_thread: list[str] = []
        self.calls: list[str] = []

    def wrap(self, name: str, fn: Callable[..., Any], big: Callable[..., bool]) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if big(*args, **kwargs):
                self.calls.append(name)
                if threading.current_thread() is threading.main_thread():
                    self.on_loop_thread.append(name)
            return fn(*args, **kwargs)

        return wrapper
