"""SQLite's WAL checkpoint runs on the store's worker thread, never in a commit on the
event loop thread, and the WAL stays bounded (gateway/store/engine/checkpoint.py)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from gateway.store.engine import checkpoint
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until_sync


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the checkpointer is SQLite's; PostgreSQL has none


def _checkpointer(gateway: GatewayHarness) -> checkpoint.Checkpointer:
    path = gateway.store.engine.url.database
    assert path
    found = checkpoint.for_file(path)
    assert found is not None
    return found


async def test_many_creates_keep_the_wal_bounded_and_checkpoint_off_the_loop(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(checkpoint, "_warned", threading.Event())  # as at start
    caplog.set_level(logging.WARNING, logger=checkpoint.__name__)
    ckpt = _checkpointer(gateway)
    wal = Path(ckpt.path + "-wal")
    conn = sqlite3.connect(ckpt.path)
    try:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    largest = 0
    for start in range(0, 5000, 50):
        answers = await asyncio.gather(*(
            gateway.client.post(
                "/v1/predictions", json={"version": VERSION, "input": {"n": n}},
                headers=gateway.headers,
            )
            for n in range(start, start + 50)
        ))
        assert {a.status for a in answers} == {201}
        largest = max(largest, wal.stat().st_size)
    assert ckpt.runs > 0
    assert threading.current_thread().name not in ckpt.threads
    assert ckpt.threads == {"wal-checkpoint_0"}
    # SQLite's own default would have started one at 1,000 pages; a few times that at most
    assert largest < 3 * checkpoint.THRESHOLD_PAGES * page, (largest, ckpt.last)
    assert "wal_index_unreadable" not in caplog.messages  # the WAL index was read
    print(f"creates 5000, checkpoints {ckpt.runs}, largest WAL {largest} B, page {page} B")


async def test_autocheckpoint_is_off_on_the_loop_connections(gateway: GatewayHarness) -> None:
    await gateway.create({"version": VERSION, "input": {"n": 1}})
    engine = gateway.store.engine
    async with engine.connect() as connection:
        value = (await connection.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar()
    assert value == 0


async def test_the_checkpointer_closes_at_shutdown(gateway: GatewayHarness) -> None:
    ckpt = _checkpointer(gateway)
    await gateway.create({"version": VERSION, "input": {"n": 1}})
    await gateway.client.close()  # the app's cleanup: engine disposed, checkpointer closed
    assert ckpt.closed
    assert checkpoint.for_file(ckpt.path) is None
    assert ckpt.last is not None and ckpt.last[1] == ckpt.last[2]  # all copied at the end
    ckpt.poke()  # a no-op once closed
    conn = sqlite3.connect(ckpt.path)
    try:  # everything committed is there
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    finally:
        conn.close()


async def test_a_checkpoint_done_before_its_submit_returns_does_not_stop_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker can run a whole checkpoint before ``submit()`` returns on the loop thread
    (the first submit starts the thread and waits for it; a loaded machine may not run the
    loop thread again in time). The running mark was the future that submit returned, set
    after the worker had cleared it: it stayed set and no checkpoint ever ran again."""
    path = tmp_path / "cutover.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    ckpt = checkpoint.Checkpointer(str(path), threshold_pages=1)
    real_submit = ckpt._executor.submit

    def submit_and_finish(fn):  # type: ignore[no-untyped-def]
        future = real_submit(fn)
        future.result()  # the worker is done before the loop thread goes on
        return future

    monkeypatch.setattr(ckpt._executor, "submit", submit_and_finish)
    try:
        for n in range(3):
            conn.execute("INSERT INTO t VALUES (?)", (n,))
            conn.commit()
            wait_until_sync(lambda: (ckpt.poke() or ckpt.runs) > n, 10.0,  # noqa: B023
                            what=f"checkpoint {n + 1}", interval_s=0.01)
        assert not ckpt.running
    finally:
        conn.close()
        await ckpt.aclose()

def _commits_until_fallback(ckpt: checkpoint.Checkpointer) -> None:
    """Commits' pokes until the fallback has run one more checkpoint, and it finished."""
    before = ckpt.runs

    def another_ran() -> bool:
        ckpt.poke()
        return ckpt.runs > before and not ckpt.running

    for _ in range(checkpoint.FALLBACK_COMMITS - 1):
        ckpt.poke()
    wait_until_sync(another_ran, 10.0, what="the fallback checkpoint", interval_s=0.01)


@pytest.mark.parametrize(
    ("shm", "reason"),
    [(None, "-shm: No such file or directory"),
     (bytes(100), "-shm header: version 0 (expected 3007000)")],
    ids=["missing", "unknown-version"],
)
async def test_the_fallback_to_every_200_commits_is_logged_once_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    shm: bytes | None, reason: str,
) -> None:
    monkeypatch.setattr(checkpoint, "_warned", threading.Event(), raising=False)  # as at start
    path = tmp_path / "rollback-journal.db"  # not WAL: SQLite keeps no WAL index for it
    sqlite3.connect(path).close()
    if shm is not None:
        (tmp_path / "rollback-journal.db-shm").write_bytes(shm)
    first, second = checkpoint.Checkpointer(str(path)), checkpoint.Checkpointer(str(path))
    try:
        with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
            for _ in range(checkpoint.FALLBACK_COMMITS - 1):
                first.poke()
            assert not caplog.records  # the fallback has not taken over yet
            first.poke()
            wait_until_sync(lambda: first.runs == 1 and not first.running, 10.0,
                            what="the fallback checkpoint")
            _commits_until_fallback(first)
            _commits_until_fallback(second)
    finally:
        await first.aclose()
        await second.aclose()
    warnings = [r for r in caplog.records if r.getMessage() == "wal_index_unreadable"]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert warnings[0].path == str(path)  # type: ignore[attr-defined]
    assert reason in warnings[0].reason  # type: ignore[attr-defined]
