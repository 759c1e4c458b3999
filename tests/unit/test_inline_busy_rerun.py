"""A call that met SQLITE_BUSY is made again (gateway/store/engine/inline.py) only when its first
run changed nothing: an ``executemany`` outside a transaction that committed some rows
before the lock was taken must not insert them a second time, and a ``COMMIT`` that
returned SQLITE_BUSY is still made again until it passes (docs/storage.md, "A cancelled
lock wait")."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from gateway.store.engine import inline


def _file(tmp_path: Path, journal: str = "WAL") -> str:
    path = str(tmp_path / "t.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()
    return path


def _rows(path: str) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [x for (x,) in conn.execute("SELECT x FROM t ORDER BY rowid")]
    finally:
        conn.close()


class _TakesTheLock:
    """A parameter whose binding has another connection take the write lock (for 0.3 s):
    between two rows of an ``executemany``."""

    def __init__(self, path: str, value: int) -> None:
        self.path, self.value, self.taken = path, value, False

    def __conform__(self, protocol: object) -> int:
        if not self.taken:
            self.taken = True
            other = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            threading.Timer(0.3, other.rollback).start()
        return self.value


async def test_an_executemany_partly_committed_is_not_made_again(tmp_path: Path) -> None:
    path = _file(tmp_path)
    conn = await inline.connect(path, 5.0)
    rows = [(0,), (1,), (_TakesTheLock(path, 2),), (3,)]
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await conn.executemany("INSERT INTO t VALUES (?)", rows)
    finally:
        await conn.close()
    assert _rows(path) == [0, 1]  # committed before the lock was taken; never twice


async def test_a_commit_that_met_the_lock_is_made_again(tmp_path: Path) -> None:
    path = _file(tmp_path, journal="DELETE")  # a COMMIT waits for readers here
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM t").fetchall()
    conn = await inline.connect(path, 5.0)
    try:
        await conn.execute("BEGIN IMMEDIATE")
        await conn.execute("INSERT INTO t VALUES (1)")
        threading.Timer(0.3, reader.rollback).start()
        await conn.commit()
    finally:
        await conn.close()
    assert _rows(path) == [1]
