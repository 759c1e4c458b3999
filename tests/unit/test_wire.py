"""``wire.body`` (the hot path's dict) is exactly ``wire.prediction(...).wire()``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from contracts.job import Job, JobState
from gateway import wire

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
BASE = {
    "id": "abc", "model": "acme/echo", "version": "hidden", "route": "r", "provider": "fake",
    "input": {"prompt": "é", "n": 1.5}, "created_at": T0,
}


@pytest.mark.parametrize(
    "fields",
    [
        {"state": JobState.QUEUED},
        {"state": JobState.RUNNING, "started_at": T0, "logs": "x\n", "output": [1, "a"]},
        {"state": JobState.COMPLETED, "started_at": T0, "completed_at": T0 + timedelta(seconds=2),
         "output": {"a": None}, "metrics": {"predict_time": 1.25, "other": 3}},
        {"state": JobState.FAILED, "error": "boom", "completed_at": T0, "deadline": T0,
         "deployment": "acme/dep", "webhook": "https://app.test/h",
         "webhook_events_filter": ["completed"]},
        {"state": JobState.CANCELED, "data_removed": True, "completed_at": T0},
    ],
)
def test_body_matches_the_prediction_model(fields: dict) -> None:
    job = Job(**BASE, **fields)
    expected = wire.prediction(job, "https://gw.test").wire()
    assert wire.body(job, "https://gw.test") == expected
    assert orjson.loads(wire.prediction_json(job, "https://gw.test")) == expected
    assert wire.body(job, "https://gw.test", status="starting")["status"] == "starting"
