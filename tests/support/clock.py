"""A clock tests move forward instead of rewriting timestamps in rows.

It is :class:`gateway.clock.Clock`: real time plus an offset that only grows, so time
still flows (leases, throttles and backoffs behave) and :meth:`MovableClock.advance`
jumps every reader of this clock at once, the rows' times and the loops' "now" alike.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

__all__ = ["MovableClock"]


class MovableClock:
    """``create_app(settings, clock=MovableClock())``; ``clock.advance(seconds)``."""

    def __init__(self) -> None:
        self._offset_s = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._offset_s)

    def monotonic(self) -> float:
        return time.monotonic() + self._offset_s

    def advance(self, by: float | timedelta) -> None:
        """Move time forward by ``by`` (seconds, or a timedelta)."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        self._offset_s += seconds
