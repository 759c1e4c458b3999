"""The clock: the one way the gateway reads time, injected so tests can move it.

:func:`gateway.app.create_app` takes a :class:`Clock` (``clock=``) and hands it to every
store, service and loop it builds; nothing below it reads the system time itself.
``now()`` is wall-clock time (timezone-aware UTC: what rows, deadlines and webhook
timestamps hold); ``monotonic()`` is seconds for intervals (keep-alives, throttles).
A test clock moves both forward together (``tests/support/clock.py``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "utcnow"]


class Clock(Protocol):
    """What the gateway asks of a clock."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...


class SystemClock:
    """The real clock: :func:`datetime.now` in UTC and :func:`time.monotonic`."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (for code outside the app: the CLI)."""
    return datetime.now(UTC)
