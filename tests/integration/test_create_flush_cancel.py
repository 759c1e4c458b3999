"""The create batcher's flusher cancelled mid-insert (gateway/store/creates.py): every
caller it was answering, or that was queued behind it, gets an answer - a 503 the client
may retry, never a 201 for a row that was not committed, never a wait without end."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from contracts.errors import ServiceUnavailable
from gateway.http import keys
from gateway.store.creates import CreateBatcher
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


@asynccontextmanager
async def _jobs_locked(url: str) -> AsyncIterator[None]:
    """Another connection holds what an insert into ``jobs`` waits for."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    pg = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with pg.transaction():
            await pg.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
            yield
    finally:
        await pg.close()


async def test_a_create_whose_flush_is_cancelled_answers_503_and_stores_nothing(
    gateway: GatewayHarness, database_url: str,
) -> None:
    body = {"version": VERSION, "input": {"n": 1}}
    async with _jobs_locked(database_url):
        posting = asyncio.create_task(
            gateway.client.post("/v1/predictions", json=body, headers=gateway.headers))
        batcher = gateway.app[keys.PREDICTIONS]._creates

        def inserting() -> bool:  # the create taken by the flusher, its insert waiting
            flusher = batcher.flusher
            return flusher is not None and not flusher.done() and not batcher._group._queue

        await wait_until(inserting, 5, what="the create's group in flight")
        flusher = batcher.flusher
        assert flusher is not None
        flusher.cancel()  # as at shutdown
        response = await asyncio.wait_for(posting, 5)
    assert response.status == 503, await response.text()
    assert response.content_type == "application/problem+json"
    assert response.headers["Retry-After"]
    listed = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    assert (await listed.json())["results"] == []
    retried = await gateway.client.post("/v1/predictions", json=body, headers=gateway.headers)
    assert retried.status == 201  # a batcher whose flusher was cancelled still works


@pytest.mark.parametrize("where", ["insert", "alone"])
async def test_every_caller_of_a_cancelled_flusher_is_answered(where: str) -> None:
    """The group in flight (in its insert, or retried row by row after it failed) and
    the creates queued behind it."""
    started = asyncio.Event()

    class Store:
        async def create(self, new: Any, shadow: Any) -> Any:
            started.set()
            await asyncio.Event().wait()

    async def insert(group: list[Any]) -> list[Any]:
        if where == "alone":
            raise OSError("the group's insert failed")
        started.set()
        await asyncio.Event().wait()
        return []

    batcher = CreateBatcher(store=Store())  # type: ignore[arg-type]
    batcher._insert = insert  # type: ignore[method-assign]
    first = asyncio.create_task(batcher.create(1))  # type: ignore[arg-type]
    await asyncio.wait_for(started.wait(), 5)
    queued = asyncio.create_task(batcher.create(2))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert batcher.flusher is not None
    batcher.flusher.cancel()
    for caller in (first, queued):
        with pytest.raises(ServiceUnavailable):
            await asyncio.wait_for(caller, 2)


async def test_a_group_whose_insert_fails_unexpectedly_answers_every_caller() -> None:
    """Not a store error (a row the answer cannot be built from, a bug): the group is
    retried row by row as for a store error, so each caller gets its own answer; the
    flusher used to end with the error and leave the group waiting forever."""
    created: list[Any] = []

    class Store:
        async def create(self, new: Any, shadow: Any) -> Any:
            if new == 2:
                raise ValueError("row 2 refused")
            created.append(new)
            return new, True

    async def insert(group: list[Any]) -> list[Any]:
        raise ValueError("the group's answer could not be built")

    batcher = CreateBatcher(store=Store())  # type: ignore[arg-type]
    batcher._insert = insert  # type: ignore[method-assign]
    callers = [asyncio.create_task(batcher.create(n)) for n in (1, 2, 3)]  # type: ignore[arg-type]
    _, pending = await asyncio.wait(callers, timeout=2)
    assert not pending
    assert [c.exception() is None for c in callers] == [True, False, True]
    assert created == [1, 3]


async def test_a_group_committed_whose_answer_was_lost_answers_201(
    gateway: GatewayHarness,
) -> None:
    """The group's COMMIT went through but its answer did not come back (a connection
    dropped at that moment): retried row by row, each row finds itself already stored
    (its id is the request's own), so the caller gets its 201 for a committed row, not a
    500 for a prediction that then runs anyway."""
    batcher = gateway.app[keys.PREDICTIONS]._creates
    real_insert = batcher._insert

    async def insert(group: list[Any]) -> list[Any]:
        await real_insert(group)
        raise OSError("connection lost after COMMIT")

    batcher._insert = insert  # type: ignore[method-assign]
    body = {"version": VERSION, "input": {"n": 1}}
    response = await gateway.client.post("/v1/predictions", json=body, headers=gateway.headers)
    assert response.status == 201, await response.text()
    created = await response.json()
    listed = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    assert [p["id"] for p in (await listed.json())["results"]] == [created["id"]]
