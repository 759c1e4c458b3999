"""The guarded job write (gateway/store/writes.py) answers the job the store holds: when
every value it writes comes back unchanged (None, str, int, bool, UTC datetimes) the row is
not read back, so the job it predicted must be the one a read returns, on both backends;
anything else (JSON, other zones) is read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from contracts.job import Job, JobState
from gateway.store.writes import Write, _stored_as_given
from tests.support.gateway import VERSION, GatewayHarness


async def _write(gateway: GatewayHarness, job_id: str, values: dict[str, Any]) -> Job | None:
    allowed = [s.value for s in JobState]
    return await gateway.store._writes.write(Write(job_id, lambda _old: values, allowed))


def test_only_values_every_backend_gives_back_unchanged_skip_the_read_back() -> None:
    at = datetime(2026, 11, 30, 18, 1, 2, 345678, tzinfo=UTC)
    assert _stored_as_given({"raw_status": "x", "submitted_at": at, "attempts": 3,
                             "data_removed": True, "lease_owner": None})
    assert not _stored_as_given({"output": ["a"]})  # JSON: read back
    assert not _stored_as_given({"submitted_at": at.astimezone(timezone(timedelta(hours=2)))})
    assert not _stored_as_given({"attempts": True})  # a bool in an integer column
    assert not _stored_as_given({"raw_status": JobState.QUEUED})  # a str subclass
    assert not _stored_as_given({"no_such_column": "x"})


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
    assert _stored_as_given(values)
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
