"""A replay's baseline draw and its progress line (gateway/rollout/replay.py,
gateway/rollout/printers.py; docs/cutover-day.md, "Replaying recorded inputs")."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.errors import ContractViolation
from gateway.rollout.printers import replay_line
from gateway.rollout.replay import baseline_draw, parse_since
from gateway.store.replays import Replay


@given(st.floats(0, 100), st.integers(0, 2000), st.integers(0, 2000))
def test_the_baseline_takes_exactly_its_share_of_any_run_of_inputs(percent, start, count):
    drawn = sum(baseline_draw(i, percent) for i in range(start, start + count))
    # evenly spread: every run of inputs holds its share, to within one
    assert abs(drawn - count * percent / 100) < 1 + 1e-9
    # from the first input: exactly floor(count * percent / 100) (the draws telescope)
    assert sum(baseline_draw(i, percent) for i in range(count)) == math.floor(
        count * percent / 100)


def test_the_ends_of_the_share():
    assert not any(baseline_draw(i, 0) for i in range(500))
    assert all(baseline_draw(i, 100) for i in range(500))
    assert [baseline_draw(i, 20) for i in range(10)] == [False] * 4 + [True] + [False] * 4 + [True]


def test_since_takes_ages_and_times_and_refuses_the_future():
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert parse_since("7d", now) == datetime(2026, 4, 24, 12, tzinfo=UTC)
    assert parse_since("90m", now) == datetime(2026, 5, 1, 10, 30, tzinfo=UTC)
    assert parse_since("2026-04-30T00:00:00Z", now) == datetime(2026, 4, 30, tzinfo=UTC)
    for bad in ("yesterday", "7w", "2026-05-02T00:00:00Z"):
        with pytest.raises(ContractViolation, match="--since"):
            parse_since(bad, now)


def _replay(**counts: int) -> Replay:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    values = {"total": 200, "sent": 0, "skipped": 0, "jobs": 0, "done": 0, "dropped": 0,
              **counts}
    return Replay(id="r1", route="acme/noise", tenant=None, since=None, until=at,
                  max_inputs=None, baseline_percent=20.0, state="running", who="cli",
                  created_at=at, updated_at=at, finished_at=None, **values)


def test_the_progress_line_counts_inputs_and_jobs():
    assert replay_line(_replay().to_json()) == (
        "replay r1 running [....................] 0% 0/200 inputs (0 skipped), 0/0 jobs done")
    half = _replay(sent=100, skipped=2, jobs=118, done=118, dropped=1).to_json()
    assert half["progress"] == 0.5
    assert replay_line(half) == ("replay r1 running [##########..........] 50% 100/200 inputs "
                                 "(2 skipped), 118/118 jobs done, 1 dropped")
    # inputs handed out but their jobs not done count half
    assert _replay(sent=200, jobs=240, done=0).progress == pytest.approx(0.4)
    assert _replay(sent=200, jobs=240, done=240).progress == 1.0
