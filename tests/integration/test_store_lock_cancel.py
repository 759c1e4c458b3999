"""A statement waiting for SQLite's write lock on a worker thread (gateway/store/engine/inline.py)
whose caller is cancelled ends cleanly: nothing logged ("Task exception was never
retrieved"), no lock left held, the engine usable; cancelled twice (SQLAlchemy then
force-closes the connection while the thread still runs the statement) the process does
not crash (it used to segfault: the connection was closed under the thread).

SQLite only: the inline connection is SQLite's (docs/storage.md, "The SQLite job store").
The scenario runs in a subprocess, so a crash fails the test instead of the test run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gateway.store.engine import db, inline


async def _until(condition: Callable[[], bool], what: str, poll_s: float) -> None:
    """Wait until ``condition()`` holds, looking every ``poll_s`` (0: at every turn of the
    loop); a deadline far beyond any of the scenario's waits fails the scenario."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(poll_s)


async def _scenario(path: str, cancels: int) -> dict[str, Any]:
    db.SQLITE_BUSY_TIMEOUT_S = 1.5  # the thread's wait gives up before the lock is freed
    made: list[inline.InlineConnection] = []  # the engine's connections, to watch
    connect = inline.connect

    def recorded(path: str, busy_timeout_s: float) -> inline.InlineConnection:
        made.append(conn := connect(path, busy_timeout_s))
        return conn

    inline.connect = recorded  # (the scenario runs in a subprocess of its own)
    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    # the lock is held for 2 s, longer than the busy timeout: the holding is the scenario
    release = threading.Timer(2.0, holder.rollback)
    release.start()

    def on_thread() -> bool:  # a call runs on its worker thread (seen from the loop)
        return any(c._in_call and c._waiting is not None for c in made)

    def closing_behind() -> bool:  # close() waits for that call (it set _give_up first)
        return any(c._give_up and c._waiting is not None and not c._waiting.done()
                   for c in made)

    async def insert() -> None:
        async with engine.begin() as conn:  # BEGIN IMMEDIATE waits on a worker thread
            await conn.execute(text("INSERT INTO t VALUES (1)"))

    task = asyncio.create_task(insert())
    await _until(on_thread, "the insert waits for the lock on a worker thread", 0.005)
    task.cancel()
    if cancels == 2:  # the second lands while SQLAlchemy's close waits for the thread
        await _until(closing_behind, "the cancelled insert's close waits", 0)
        task.cancel()
    started = loop.time()
    await asyncio.wait([task])
    settled_s = loop.time() - started
    cancelled = task.cancelled()
    release.join()
    await _until(lambda: all(c._waiting is None or c._waiting.done() for c in made),
                 "no call of the engine runs on a thread", 0.005)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")  # no connection of the engine holds the lock
        other.rollback()
        lock_free = True
    except sqlite3.OperationalError:
        lock_free = False
    other.close()
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t VALUES (2)"))
        rows = (await conn.execute(text("SELECT x FROM t"))).scalars().all()
    await engine.dispose()
    holder.close()
    del task
    for _ in range(3):  # an exception never retrieved is reported when its task is freed
        gc.collect()
        await asyncio.sleep(0)  # and the callbacks that free one run
    return {
        "cancelled": cancelled, "lock_free": lock_free, "rows": rows,
        "reported": reported, "settled_s": settled_s,
    }


@pytest.mark.parametrize("cancels", [1, 2])
def test_a_cancelled_lock_wait_ends_cleanly(tmp_path: Path, cancels: int) -> None:
    code = (
        "import asyncio, json, sys; from tests.integration import test_store_lock_cancel as t;"
        f"print(json.dumps(asyncio.run(t._scenario({str(tmp_path / 'db.sqlite')!r}, {cancels}))))"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["cancelled"] and got["lock_free"] and got["rows"] == [2]
    assert got["reported"] == []
    # from the last cancel: the wait is given up (within a 0.1 s slice), not sat out to
    # the busy timeout (1.5 s)
    assert got["settled_s"] < 0.5
