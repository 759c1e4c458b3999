"""The guarded job write (gateway/store/writes.py) answers the job the store holds: when
every value it writes comes back unchanged (None, str, int, bool, UTC datetimes) the row is
not read back, so the job it predicted must be the one a read returns, on both backends;
anything else (JSON, other zones) is read back."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from contracts.job import Job, JobState
from gateway.store.writes import Write, stored_as_given
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def _write(gateway: GatewayHarness, job_id: str, values: dict[str, Any]) -> Job | None:
    allowed = [s.value for s in JobState]
    return await gateway.store._writes.write(Write(job_id, lambda _old: values, allowed))


def test_only_values_every_backend_gives_back_unchanged_skip_the_read_back() -> None:
    at = datetime(2026, 11, 30, 18, 1, 2, 345678, tzinfo=UTC)
    assert stored_as_given({"raw_status": "x", "submitted_at": at, "attempts": 3,
                             "data_removed": True, "lease_owner": None})
    assert not stored_as_given({"output": ["a"]})  # JSON: read back
    assert not stored_as_given({"submitted_at": at.astimezone(timezone(timedelta(hours=2)))})
    assert not stored_as_given({"attempts": True})  # a bool in an integer column
    assert not stored_as_given({"raw_status": JobState.QUEUED})  # a str subclass
    assert not stored_as_given({"no_such_column": "x"})


async def test_a_write_not_read_back_answers_the_job_a_read_returns(
    gateway: GatewayHarness,
) -> None:
    created = await gateway.create({"version": VERSION, "input": {"n": 1}})
    at = datetime(2026, 11, 30, 18, 1, 2, 345678, tzinfo=UTC)
    values = {
        "state": JobState.RUNNING.value, "raw_status": "processing \u00e9\u4e2d",
        "provider_job_id": "p-1", "submitted_at": at, "started_at": at + timedelta(seconds=1),
        "logs": "line 1\nline 2\t\u2603", "attempts": 7, "data_removed": False,
        "lease_owner": None, "leased_until": None, "next_attempt_at": at,
        "updated_at": at, "priority": -3,
    }
    assert stored_as_given(values)
    written = await _write(gateway, created["id"], values)
    stored = await gateway.store.get(created["id"])
    assert written == stored
    assert written is not None and written.started_at is not None
    assert written.started_at.tzinfo is stored.started_at.tzinfo  # type: ignore[union-attr]


async def test_json_values_are_read_back_as_stored(gateway: GatewayHarness) -> None:
    created = await gateway.create({"version": VERSION, "input": {"n": 1}})
    values = {"output": ("a", {"1": 2}), "metrics": {"predict_time": 1.5}}
    written = await _write(gateway, created["id"], values)
    stored = await gateway.store.get(created["id"])
    assert written == stored
    assert written is not None and written.output == ["a", {"1": 2}]  # the tuple as a list


async def test_a_row_changed_after_it_was_read_is_decided_again(
    gateway: GatewayHarness,
) -> None:
    """On SQLite the locked read compares the rows the lock-free reader gives before and
    inside the transaction: a commit in between (here another connection's, while the
    write decides) makes the write decide again on the new row."""
    engine = gateway.store._engine
    if engine.dialect.name != "sqlite":
        pytest.skip("the reader's comparison is SQLite's; PostgreSQL locks FOR NO KEY UPDATE")
    created = await gateway.create({"version": VERSION, "input": {"n": 1}})
    seen: list[str | None] = []

    def decide(old: Job) -> dict[str, Any]:
        seen.append(old.raw_status)
        if len(seen) == 1:
            with sqlite3.connect(engine.url.database) as other:
                other.execute("UPDATE jobs SET raw_status = 'other' WHERE id = ?", (old.id,))
        return {"logs": f"decided on {old.raw_status}"}

    allowed = [s.value for s in JobState]
    written = await gateway.store._writes.write(Write(created["id"], decide, allowed))
    assert seen[-1] == "other" and len(seen) == 2
    assert written is not None and written.logs == "decided on other"
    assert written == await gateway.store.get(created["id"])


async def test_on_a_sqlite_file_a_write_without_outbox_rows_commits_through_sqlite3(
    gateway: GatewayHarness,
) -> None:
    """The write's group runs on the ``sqlite3`` connection of :mod:`gateway.store.writes`
    (what its module docstring says), and answers the job a read returns."""
    writes = gateway.store._writes
    if not writes._fast._path:
        pytest.skip("the sqlite3 path is SQLite's")
    created = await gateway.create({"version": VERSION, "input": {"n": 1}})
    assert writes._fast._conn is None  # nothing written through it yet
    written = await _write(gateway, created["id"], {"logs": "one\n", "output": ["a"]})
    assert writes._fast._conn is not None
    assert written == await gateway.store.get(created["id"])
    assert written is not None and written.output == ["a"]
