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
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gateway.store.engine import db


async def _scenario(path: str, cancels: int) -> dict[str, Any]:
    db.SQLITE_BUSY_TIMEOUT_S = 1.5  # the thread's wait gives up before the lock is freed
    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(2.0, holder.rollback)
    release.start()

    async def insert() -> None:
        async with engine.begin() as conn:  # BEGIN IMMEDIATE waits on a worker thread
            await conn.execute(text("INSERT INTO t VALUES (1)"))

    task = asyncio.create_task(insert())
    await asyncio.sleep(0.3)
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.2)
    started = loop.time()
    await asyncio.wait([task])
    settled_s = loop.time() - started
    cancelled = task.cancelled()
    release.join()
    await asyncio.sleep(0.5)
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
    for _ in range(2):  # an exception never retrieved is reported when its task is freed
        gc.collect()
        await asyncio.sleep(0.1)
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
    assert got["settled_s"] < 0.5  # the wait is given up, not sat out to the busy timeout
