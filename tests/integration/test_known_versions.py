"""GET on SQLite answers an unchanged prediction without a read, and never a stale one
(gateway/store/versions.py, gateway/store/engine/walstamp.py; docs/lifecycle.md, "Reads
of a prediction").

The database's change stamp is its WAL index header, which every commit of every process
rewrites. The changes here are made by another operating-system process (a ``python``
child with the standard library's ``sqlite3``, as another gateway or an operator's tool
would write the file), by this process's own engine, and after the WAL was checkpointed
and restarted (new salts, frame count back to zero): after each, the next GET shows the
row as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.http import keys
from gateway.store.engine.walstamp import WalStamp
from gateway.store.reader import SqliteReads
from gateway.store.schema import jobs
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

BODY = {"version": VERSION, "input": {"text": "stamp"}}
D = {"Authorization": f"Bearer {TOKEN}"}

_OTHER_PROCESS = """
import sqlite3, sys
path, job_id, logs, checkpoint = sys.argv[1:]
conn = sqlite3.connect(path, isolation_level=None, timeout=10)
if checkpoint == "1":
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
conn.execute("UPDATE jobs SET logs = ? WHERE id = ?", (logs, job_id))
conn.close()
"""


def database(gw: GatewayHarness) -> str:
    path = gw.store.engine.url.database
    assert path and path != ":memory:", "these tests need a SQLite file"
    return path


_JOBS = ("CREATE TABLE jobs(id TEXT PRIMARY KEY, row_version INT, updated_at TEXT, "
         "tenant TEXT, arm TEXT)")


def write_elsewhere(path: str, job_id: str, logs: str, *, checkpoint: bool = False) -> None:
    """Set the job's logs from another process (and first checkpoint and truncate the
    WAL, so the next write restarts it)."""
    subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, job_id, logs,
                    "1" if checkpoint else "0"], check=True, timeout=30)


async def write_here(gw: GatewayHarness, job_id: str, logs: str) -> None:
    async with gw.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(logs=logs))


async def logs_of(gw: GatewayHarness, job_id: str) -> str:
    response = await gw.client.get(f"/v1/predictions/{job_id}", headers=D)
    assert response.status == 200, await response.text()
    return str((await response.json())["logs"])


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the WAL index is SQLite's


async def test_an_unchanged_prediction_is_answered_without_a_read(
        gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = (await gateway.create(BODY))["id"]
    await logs_of(gateway, job_id)  # read once: known from now on
    reads = gateway.store.fast_reads
    made: list[list[str]] = []
    versions = reads.versions

    def counted(ids: list[str]) -> Any:
        made.append(list(ids))
        return versions(ids)

    monkeypatch.setattr(reads, "versions", counted)
    for _ in range(5):
        assert await logs_of(gateway, job_id) == ""
    assert made == []  # nothing committed: the known version answered
    write_elsewhere(database(gateway), job_id, "changed")
    assert await logs_of(gateway, job_id) == "changed"
    assert made == [[job_id]]  # the commit made it read again


async def test_every_change_of_any_process_is_in_the_next_get(gateway: GatewayHarness) -> None:
    path = database(gateway)
    job_ids = [(await gateway.create(BODY))["id"] for _ in range(2)]
    steps = ["elsewhere", "here", "elsewhere-after-checkpoint", "elsewhere", "here", "here",
             "elsewhere-after-checkpoint", "elsewhere-after-checkpoint"]
    for n, step in enumerate(steps):
        for job_id in job_ids:  # both known before the change
            await logs_of(gateway, job_id)
        changed, other = job_ids[n % 2], job_ids[(n + 1) % 2]
        before = await logs_of(gateway, other)
        logs = f"{step} {n}\n"
        if step == "here":
            await write_here(gateway, changed, logs)
        else:
            write_elsewhere(path, changed, logs, checkpoint=step.endswith("checkpoint"))
        assert await logs_of(gateway, changed) == logs, step
        assert await logs_of(gateway, other) == before  # its own row, still right
        assert await logs_of(gateway, changed) == logs, step  # and again, now known


async def test_the_answer_is_the_row_as_rendered_now(gateway: GatewayHarness) -> None:
    job_id = (await gateway.create(BODY))["id"]
    service = gateway.app[keys.PREDICTIONS]
    write_elsewhere(database(gateway), job_id, "by another process\n")
    response = await gateway.client.get(f"/v1/predictions/{job_id}", headers=D)
    shown = await response.json()
    assert shown == json.loads(service.render(await gateway.store.get(job_id)))


async def test_the_stamp_changes_with_each_commit_and_only_then(tmp_path: Path) -> None:
    path = str(tmp_path / "stamp.db")
    writer = create_async_engine(f"sqlite+aiosqlite:///{path}")
    async with writer.begin() as conn:
        await conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        await conn.exec_driver_sql(_JOBS)
    reads = SqliteReads(writer)  # type: ignore[arg-type]  # url and dialect are all it reads
    try:
        first = reads.stamp()
        assert first is not None and len(first) == 48
        assert reads.versions(["p1", "p2", "p3"]) == {}  # reads change nothing
        assert reads.stamp() == first
        async with writer.begin() as conn:  # nor does a commit that changes no row
            await conn.execute(sa.text("DELETE FROM jobs WHERE id = 'none'"))
        assert reads.stamp() == first
        seen = {first}
        for n in range(4):
            async with writer.begin() as conn:
                await conn.execute(sa.text("INSERT INTO jobs (id, row_version) VALUES (:id, 0)"),
                                   {"id": f"p{n}"})
            if n == 2:
                subprocess.run([sys.executable, "-c", (
                    "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                    "c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall(); "
                    "c.execute('CREATE TABLE t(x)'); c.commit()"), path], check=True, timeout=30)
            now = reads.stamp()
            assert now is not None and now not in seen, n
            seen.add(now)
            assert reads.stamp() == now
        assert set(reads.versions(["p0", "p3", "p9"]) or {}) == {"p0", "p3"}
    finally:
        reads.close()
        await writer.dispose()


def test_no_stamp_without_a_wal(tmp_path: Path) -> None:
    path = tmp_path / "rollback.db"
    subprocess.run([sys.executable, "-c", (
        "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); "
        "c.commit()"), str(path), _JOBS], check=True, timeout=30)
    with pytest.raises(OSError, match="shm"):
        WalStamp(str(path))
    reads = SqliteReads(create_async_engine(f"sqlite+aiosqlite:///{path}"))  # type: ignore[arg-type]
    try:
        assert reads.versions(["x"]) == {}
        assert reads.stamp() is None  # rollback journal: every GET reads
    finally:
        reads.close()
