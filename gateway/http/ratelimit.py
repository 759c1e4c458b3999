"""Token buckets per API token: Replicate's request limits, reproduced (docs/limits.md).

A bucket holds up to ``capacity`` requests and refills at ``rate_per_s``; a request takes
one, or is refused with the seconds until one is back. Buckets are per process, keyed by
``(token name, kind)`` where kind is ``create`` or ``other`` (docs/replicate-api.md §5.1).
The clock is injected, so tests need no sleeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.clock import SYSTEM_CLOCK, Clock

__all__ = ["Limiter", "TokenBucket"]


@dataclass
class TokenBucket:
    """One bucket; ``take()`` returns 0.0 when allowed, else seconds to wait."""

    rate_per_s: float
    capacity: float
    level: float
    updated: float

    def take(self, now: float) -> float:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / self.rate_per_s


class Limiter:
    """Buckets for every (token name, kind), created on first use.

    Parameters
    ----------
    per_minute : dict
        Requests a minute for each kind (``{"create": 600, "other": 3000}``).
    burst_s : float
        The bucket holds this many seconds' worth of requests (at least one).
    clock : Clock
        Its ``monotonic()`` seconds refill the buckets.
    """

    def __init__(
        self,
        per_minute: dict[str, float],
        burst_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._per_s = {kind: rate / 60.0 for kind, rate in per_minute.items()}
        self._burst_s = burst_s
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def check(self, token_name: str, kind: str) -> int:
        """0 when the request may go on, else whole seconds until it may (>= 1)."""
        rate = self._per_s[kind]
        now = self._clock.monotonic()
        bucket = self._buckets.get((token_name, kind))
        if bucket is None:
            capacity = max(1.0, rate * self._burst_s)
            bucket = TokenBucket(rate, capacity, capacity, now)
            self._buckets[(token_name, kind)] = bucket
        wait_s = bucket.take(now)
        return 0 if wait_s == 0.0 else max(1, math.ceil(wait_s))
