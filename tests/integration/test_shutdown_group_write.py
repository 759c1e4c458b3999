"""Shutdown while a background loop's grouped write is in flight (docs/reliability.md,
"Shutdown and the store"): no store write, group flusher or connection after the
engine's dispose, and no task left pending.

A flusher cancelled before it answered its group answers its callers with a 503
(``ServiceUnavailable``), which :func:`gateway.boundary.verdict` classes as "retry" where
a cancellation passed through; a loop retrying it late in shutdown would start a new
flusher after the dispose. It cannot: at shutdown nothing cancels a flusher but the
event loop's final cancel of every task left (``web.run_app``, after the app's cleanup),
and by then the loops' own tasks are gone (stopped, then cancelled and awaited, before
the engine is disposed of; gateway/app.py); a loop cancelled while awaiting a write gets
``CancelledError`` (the flusher's result is shielded from it, not the caller's cancel).
This test runs that sequence with the real loops and a write that never commits.
"""

from __future__ import annotations

import asyncio
import traceback
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import event

from gateway import app as app_module
from gateway.app import create_app
from gateway.config import Settings
from gateway.http import keys
from gateway.store.engine.group import Group
from tests.support.gateway import VERSION, GatewayHarness, settings_dict
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_a_loop_write_in_flight_at_shutdown_starts_nothing_after_the_dispose(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_module, "SHUTDOWN_GRACE_S", 0.2)  # then the loops are cancelled
    settings = Settings(**settings_dict(database_url, str(tmp_path / "assets")))
    app = create_app(settings, run_loops=True)
    disposed: list[bool] = []  # set once the engine was disposed of
    after: list[str] = []  # what the store did after that
    writers: set[str] = set()  # the modules a job write came through
    calls = Group.__call__

    async def call(group: Group[Any, Any], item: Any) -> Any:
        if group._name == "job-writes":
            writers.update(Path(frame.filename).name for frame in traceback.extract_stack())
        if disposed:
            after.append(f"write to {group._name}")
        return await calls(group, item)

    monkeypatch.setattr(Group, "__call__", call)
    before = asyncio.all_tasks()
    client = TestClient(TestServer(app))
    await client.start_server()
    gateway = GatewayHarness(app=app, client=client)
    store = app[keys.STORE]
    engine = store.engine

    @event.listens_for(engine.sync_engine, "checkout")
    def checkout(*_: Any) -> None:
        if engine.disposals:
            after.append("connection checked out")

    group = store._writes._group
    in_flight = asyncio.Event()

    async def never_commits(items: list[Any]) -> list[Any]:
        in_flight.set()
        await asyncio.Event().wait()  # a commit still in doubt at shutdown
        raise AssertionError("unreachable")

    monkeypatch.setattr(group, "_run", never_commits)
    await gateway.create({"version": VERSION, "input": {"prompt": "x"}})  # a loop writes it
    await asyncio.wait_for(in_flight.wait(), 10)
    flusher = group.flusher
    assert flusher is not None and not flusher.done()
    assert "boundary.py" in writers, writers  # a loop's item (gateway/boundary.each)
    await client.close()  # the app's cleanup: loops stopped, cancelled; engine disposed
    assert engine.disposals >= 1
    disposed.append(True)
    assert not flusher.done()  # the loop's caller went away; its commit goes on
    left = asyncio.all_tasks() - before - {asyncio.current_task()}
    for task in left:  # as web.run_app ends: cancel every task left
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    await wait_until(flusher.done, timeout_s=5, what="the flusher ended")
    assert flusher.cancelled()
    assert after == []
    assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()
