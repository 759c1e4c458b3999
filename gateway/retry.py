"""Retry as a pure policy: when to try again, never how to wait (docs/architecture.md, rule 13).

Callers persist the answer (``next_poll_at``, ``next_attempt_at``) and a loop picks the
row up when it is due; nothing here sleeps, reads the clock or owns randomness. The clock
(``now``) and the random source (``rng``) are passed in so tests are deterministic.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

__all__ = [
    "DEFAULT_WEBHOOK_SCHEDULE",
    "MAX_RETRY_AFTER_S",
    "Backoff",
    "Schedule",
    "parse_retry_after",
]

MAX_RETRY_AFTER_S = 300.0
"""Default cap on an honoured ``Retry-After``, in seconds.

Deliveries to one prediction are sequential (docs/replicate-api.md §6.3), so one
receiver's hint holds that prediction's queue; five minutes is about Cog's own window for
terminal retries (docs/cog.md §1.9).
"""

_DELTA_SECONDS = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with optional full jitter (for polling and upstream calls).

    Parameters
    ----------
    base_s : float
        Cap of the first delay, in seconds (>= 0).
    max_s : float
        Largest cap, in seconds (>= base_s).
    factor : float
        Growth of the cap per attempt (>= 1).
    jitter : bool
        Full jitter: draw uniformly in ``[0, cap]``. Without it, the delay is the cap.

    Raises
    ------
    ValueError
        A negative or non-finite duration, ``max_s < base_s`` or ``factor < 1``.
    """

    base_s: float
    max_s: float
    factor: float = 2.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base_s) and math.isfinite(self.max_s)):
            raise ValueError("backoff durations must be finite")
        if not 0 <= self.base_s <= self.max_s:
            raise ValueError("backoff needs 0 <= base_s <= max_s")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError("backoff factor must be finite and >= 1")

    def cap_s(self, attempt: int) -> float:
        """Upper bound of the delay after attempt ``attempt`` (1-based), in seconds.

        ``min(max_s, base_s * factor ** (attempt - 1))``.

        Raises
        ------
        ValueError
            ``attempt < 1``.
        """
        if attempt < 1:
            raise ValueError("attempts count from 1")
        if self.base_s == 0:
            return 0.0
        try:
            grown = self.base_s * self.factor ** (attempt - 1)
        except OverflowError:  # factor ** n beyond a double: compare in logs
            log_grown = math.log(self.base_s) + (attempt - 1) * math.log(self.factor)
            grown = math.exp(log_grown) if log_grown < math.log(self.max_s) else self.max_s
        return min(self.max_s, grown)

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after attempt ``attempt`` (1-based) failed.

        Parameters
        ----------
        attempt : int
            The attempt that just failed, counting from 1.
        rng : random.Random
            The random source (seeded in tests).

        Returns
        -------
        float
            Uniform in ``[0, cap_s(attempt)]`` with jitter ("full jitter"), else the cap.

        Raises
        ------
        ValueError
            ``attempt < 1``.
        """
        cap = self.cap_s(attempt)
        return min(cap, rng.uniform(0.0, cap)) if self.jitter else cap


@dataclass(frozen=True)
class Schedule:
    """A fixed retry schedule, for outbound webhook deliveries (§6.3).

    Parameters
    ----------
    delays_s : tuple[float, ...]
        ``delays_s[i]`` is the nominal wait, in seconds, after attempt ``i + 1`` failed.
        There are at most ``len(delays_s) + 1`` attempts.
    jitter_ratio : float
        Each delay is scaled by a uniform factor in ``[1 - ratio, 1 + ratio]``, in
        ``[0, 1)``, so receivers are not hit in lockstep.
    max_retry_after_s : float
        Cap on an honoured ``Retry-After``, in seconds (:data:`MAX_RETRY_AFTER_S`).

    Raises
    ------
    ValueError
        A negative or non-finite delay or cap, or a ratio outside ``[0, 1)``.
    """

    delays_s: tuple[float, ...]
    jitter_ratio: float = 0.1
    max_retry_after_s: float = MAX_RETRY_AFTER_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "delays_s", tuple(self.delays_s))
        if not all(math.isfinite(d) and d >= 0 for d in self.delays_s):
            raise ValueError("schedule delays must be finite and >= 0")
        if not 0 <= self.jitter_ratio < 1:
            raise ValueError("jitter_ratio must be in [0, 1)")
        if not (math.isfinite(self.max_retry_after_s) and self.max_retry_after_s >= 0):
            raise ValueError("max_retry_after_s must be finite and >= 0")

    @property
    def max_attempts(self) -> int:
        """Total attempts, the first one included: ``len(delays_s) + 1``."""
        return len(self.delays_s) + 1

    def next_attempt_at(
        self,
        attempt: int,
        now: datetime,
        rng: random.Random,
        retry_after_s: float | None = None,
    ) -> datetime | None:
        """Decide when to try again after attempt ``attempt`` failed, or give up.

        Parameters
        ----------
        attempt : int
            The attempt that just failed, counting from 1.
        now : datetime
            Timezone-aware time of the failure.
        rng : random.Random
            The random source for jitter.
        retry_after_s : float, optional
            The receiver's ``Retry-After`` (:func:`parse_retry_after`), in seconds.

        Returns
        -------
        datetime or None
            ``now`` plus the jittered delay, or plus ``min(retry_after_s,
            max_retry_after_s)`` when that is later; None once the schedule is spent
            (dead-letter the message).

        Raises
        ------
        ValueError
            ``attempt < 1`` or a naive ``now``.
        """
        if attempt < 1:
            raise ValueError("attempts count from 1")
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        if attempt > len(self.delays_s):
            return None
        spread = rng.uniform(-self.jitter_ratio, self.jitter_ratio)
        delay = max(0.0, self.delays_s[attempt - 1] * (1.0 + spread))
        if retry_after_s is not None and not math.isnan(retry_after_s):
            delay = max(delay, min(max(retry_after_s, 0.0), self.max_retry_after_s))
        return now + timedelta(seconds=delay)


DEFAULT_WEBHOOK_SCHEDULE = Schedule(delays_s=(1.0, 2.0, 4.0, 8.0, 15.0, 30.0))
"""Seven attempts, the last about one minute after the first, like Replicate's (§6.3)."""


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Read an HTTP ``Retry-After`` header (RFC 9110 §10.2.3) as seconds from ``now``.

    Parameters
    ----------
    value : str or None
        The header value: delay-seconds (``"120"``; a sign or a fraction is tolerated)
        or an HTTP-date (IMF-fixdate, RFC 850 or asctime, read as UTC).
    now : datetime
        Timezone-aware time the response was received.

    Returns
    -------
    float or None
        Seconds to wait, finite and >= 0 (a negative delay or a past date gives 0.0);
        None when the header is absent, empty, unreadable or overflows a float.

    Raises
    ------
    ValueError
        A naive ``now``.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if value is None or not value.strip():
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        seconds = float(text)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    return _seconds_until_date(text, now)


def _seconds_until_date(text: str, now: datetime) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())
