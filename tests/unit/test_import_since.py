"""``cutover import --since``: ``30d``, ``12h``, ``90m`` before now, or an ISO 8601 time;
anything else is a clear error (docs/cutover-day.md, "Importing history")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contracts.errors import ContractViolation
from gateway.legacy.importcli import parse_since

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "ago"), [
    ("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("90m", timedelta(minutes=90)),
])
def test_a_duration_counts_back_from_now(text: str, ago: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - ago


def test_an_iso_time_is_taken_as_is() -> None:
    assert parse_since("2026-11-01T00:00:00Z", NOW) == datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize("text", ["30", "thirty days", "-3d", "3w"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ContractViolation):
        parse_since(text, NOW)
