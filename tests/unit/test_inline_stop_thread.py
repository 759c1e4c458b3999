"""An inline SQLite connection stopped from another thread (SQLAlchemy terminates a
connection it finds unreferenced from whatever thread the garbage collector runs on)
while a statement runs on the event loop: the statement ends, then the connection is
closed; closing it under the statement crashed the process (gateway/store/engine/inline.py).

The scenario runs in a subprocess, so a crash fails the test instead of the test run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from gateway.store.engine import inline

_LONG = (  # about a second of work on the loop
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000)"
    " SELECT sum(x) FROM c"
)


async def _scenario(path: str) -> dict[str, Any]:
    sqlite3.connect(path).close()
    conn = await inline.connect(path, 5.0)
    stopper = threading.Timer(0.2, conn.stop)
    stopper.start()
    cursor = await conn.execute(_LONG)  # stopped meanwhile: the statement runs to its end
    stopper.join()
    try:
        await cursor.fetchall()
        after = "fetched"
    except ValueError as exc:  # then the connection is closed
        after = str(exc)
    return {"after": after, "closed": conn._connection is None}


def test_a_connection_stopped_from_another_thread_mid_statement(tmp_path: Path) -> None:
    code = (
        "import asyncio, json; from tests.unit import test_inline_stop_thread as t;"
        f"print(json.dumps(asyncio.run(t._scenario({str(tmp_path / 'db.sqlite')!r}))))"
    )
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"after": "Connection closed", "closed": True}


def test_stop_is_safe_to_call_again(tmp_path: Path) -> None:
    async def run() -> None:
        conn = await inline.connect(str(tmp_path / "db.sqlite"), 5.0)
        conn.stop()
        conn.stop()
        await conn.close()
        assert conn._connection is None

    asyncio.run(run())
