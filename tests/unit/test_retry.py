"""gateway.retry: pure retry decisions, clock and randomness injected."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import retry

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

durations = st.floats(0, 1e6, allow_nan=False)
attempts = st.integers(1, 10_000)
seeds = st.integers(0, 2**32)


@st.composite
def backoffs(draw: st.DrawFn) -> retry.Backoff:
    base_s = draw(durations)
    max_s = base_s + draw(durations)
    factor = draw(st.floats(1, 10, allow_nan=False))
    return retry.Backoff(base_s=base_s, max_s=max_s, factor=factor, jitter=draw(st.booleans()))


schedules = st.builds(
    retry.Schedule,
    delays_s=st.lists(durations, max_size=12).map(tuple),
    jitter_ratio=st.floats(0, 0.99),
    max_retry_after_s=durations,
)


# --- Backoff ---------------------------------------------------------------------------


def test_backoff_grows_exponentially_to_the_cap_without_jitter() -> None:
    backoff = retry.Backoff(base_s=0.5, max_s=5.0, jitter=False)
    rng = random.Random(0)
    assert [backoff.delay_s(n, rng) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.delay_s(100_000, rng) == 5.0  # no OverflowError on huge attempts
    tiny = retry.Backoff(base_s=1e-300, max_s=1e300, jitter=False)
    assert tiny.cap_s(1025) == pytest.approx(1e-300 * 2.0**1000 * 2.0**24)
    assert retry.Backoff(base_s=0.0, max_s=1.0, jitter=False).cap_s(5000) == 0.0


def test_full_jitter_spreads_over_the_whole_range() -> None:
    backoff = retry.Backoff(base_s=1.0, max_s=60.0)
    rng = random.Random(7)
    draws = [backoff.delay_s(4, rng) for _ in range(2000)]
    assert min(draws) < 0.1 * 8 and max(draws) > 0.9 * 8  # uniform in [0, 8]
    assert all(0 <= d <= 8 for d in draws)
    again = random.Random(7)
    assert [backoff.delay_s(4, again) for _ in range(2000)] == draws  # seeded: reproducible


@given(backoff=backoffs(), attempt=attempts, seed=seeds)
def test_backoff_delay_is_within_zero_and_the_cap(
    backoff: retry.Backoff, attempt: int, seed: int
) -> None:
    delay = backoff.delay_s(attempt, random.Random(seed))
    assert 0 <= delay <= backoff.max_s
    if backoff.base_s == 0:
        assert delay == 0
    elif delay > 0:  # delay <= base_s * factor ** (attempt - 1), compared in logs
        bound = math.log(backoff.base_s) + (attempt - 1) * math.log(backoff.factor)
        assert math.log(delay) <= bound + 1e-9
    if not backoff.jitter:
        assert delay == backoff.cap_s(attempt)


@given(backoff=backoffs(), attempt=attempts)
def test_backoff_cap_never_shrinks(backoff: retry.Backoff, attempt: int) -> None:
    assert backoff.cap_s(attempt) <= backoff.cap_s(attempt + 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_s": -1, "max_s": 1},
        {"base_s": 2, "max_s": 1},
        {"base_s": 1, "max_s": math.inf},
        {"base_s": 1, "max_s": 2, "factor": 0.5},
        {"base_s": 1, "max_s": 2, "factor": math.nan},
    ],
)
def test_backoff_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        retry.Backoff(**kwargs)


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError):
        retry.Backoff(base_s=1, max_s=2).delay_s(0, random.Random(0))
    with pytest.raises(ValueError):
        retry.DEFAULT_WEBHOOK_SCHEDULE.next_attempt_at(0, NOW, random.Random(0))


# --- Schedule ----------------------------------------------------------------------------


def test_schedule_follows_its_delays_then_gives_up() -> None:
    schedule = retry.Schedule(delays_s=(1.0, 10.0, 60.0), jitter_ratio=0.0)
    rng = random.Random(0)
    assert schedule.max_attempts == 4
    got = [schedule.next_attempt_at(n, NOW, rng) for n in range(1, 6)]
    assert got == [
        NOW + timedelta(seconds=1),
        NOW + timedelta(seconds=10),
        NOW + timedelta(seconds=60),
        None,
        None,
    ]


def test_default_webhook_schedule_ends_about_a_minute_in() -> None:
    schedule = retry.DEFAULT_WEBHOOK_SCHEDULE
    assert 50 <= sum(schedule.delays_s) <= 70  # §6.3: last retry ~1 min after completion
    assert schedule.next_attempt_at(schedule.max_attempts, NOW, random.Random(0)) is None


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    schedule = retry.Schedule(delays_s=(1.0, 1.0), jitter_ratio=0.0, max_retry_after_s=120.0)
    rng = random.Random(0)
    assert schedule.next_attempt_at(1, NOW, rng, retry_after_s=30) == NOW + timedelta(seconds=30)
    assert schedule.next_attempt_at(1, NOW, rng, retry_after_s=0.5) == NOW + timedelta(seconds=1)
    assert schedule.next_attempt_at(1, NOW, rng, 3600) == NOW + timedelta(seconds=120)
    assert schedule.next_attempt_at(1, NOW, rng, math.inf) == NOW + timedelta(seconds=120)
    assert schedule.next_attempt_at(1, NOW, rng, math.nan) == NOW + timedelta(seconds=1)
    assert schedule.next_attempt_at(2, NOW, rng, retry_after_s=30) == NOW + timedelta(seconds=30)
    assert schedule.next_attempt_at(3, NOW, rng, retry_after_s=30) is None  # still gives up
    assert retry.Schedule(delays_s=(1.0,)).max_retry_after_s == retry.MAX_RETRY_AFTER_S


@given(
    schedule=schedules,
    attempt=st.integers(1, 20),
    seed=seeds,
    retry_after_s=st.none() | st.floats(-1e3, 1e7, allow_nan=False),
)
def test_schedule_properties(
    schedule: retry.Schedule, attempt: int, seed: int, retry_after_s: float | None
) -> None:
    at = schedule.next_attempt_at(attempt, NOW, random.Random(seed), retry_after_s)
    if attempt >= schedule.max_attempts:
        assert at is None  # the schedule's length bounds the attempts
        return
    assert at is not None
    delay = (at - NOW).total_seconds()
    nominal = schedule.delays_s[attempt - 1]
    tolerance = 1e-6 + 1e-9 * nominal  # timedelta keeps microseconds
    assert delay >= 0
    assert (
        delay <= max(nominal * (1 + schedule.jitter_ratio), schedule.max_retry_after_s) + tolerance
    )
    if retry_after_s is None:
        assert nominal * (1 - schedule.jitter_ratio) - tolerance <= delay
        assert delay <= nominal * (1 + schedule.jitter_ratio) + tolerance
    else:
        honoured = min(max(retry_after_s, 0.0), schedule.max_retry_after_s)
        assert delay >= honoured - tolerance


def test_schedule_refuses_nonsense_and_naive_clocks() -> None:
    for kwargs in (
        {"delays_s": (-1.0,)},
        {"delays_s": (math.inf,)},
        {"delays_s": (), "jitter_ratio": 1.0},
    ):
        with pytest.raises(ValueError):
            retry.Schedule(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timezone"):
        retry.DEFAULT_WEBHOOK_SCHEDULE.next_attempt_at(1, datetime(2026, 1, 1), random.Random(0))
    assert retry.Schedule(delays_s=[1.0, 2.0]).delays_s == (1.0, 2.0)  # type: ignore[arg-type]


# --- parse_retry_after ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("  7 ", 7.0),
        ("0", 0.0),
        ("-5", 0.0),
        ("1.5", 1.5),
        ("Fri, 01 May 2026 12:02:00 GMT", 120.0),  # IMF-fixdate
        ("Friday, 01-May-26 12:00:30 GMT", 30.0),  # RFC 850
        ("Fri May  1 12:00:10 2026", 10.0),  # asctime, read as UTC
        ("Thu, 30 Apr 2026 12:00:00 GMT", 0.0),  # in the past
        (None, None),
        ("", None),
        ("soon", None),
        ("12 seconds", None),
        ("1e3", None),
        ("Fri, 99 May 2026 12:00:00 GMT", None),
        ("9" * 400, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert retry.parse_retry_after(value, NOW) == expected


@given(seconds=st.integers(-(10**6), 10**12))
def test_delta_seconds_are_read_exactly(seconds: int) -> None:
    assert retry.parse_retry_after(str(seconds), NOW) == max(0, seconds)


@given(offset_s=st.integers(-(10**8), 10**8))
def test_http_dates_are_read_relative_to_now(offset_s: int) -> None:
    header = format_datetime(NOW + timedelta(seconds=offset_s), usegmt=True)
    assert retry.parse_retry_after(header, NOW) == max(0.0, float(offset_s))


@given(value=st.text(max_size=40))
def test_parse_retry_after_never_raises_on_garbage(value: str) -> None:
    parsed = retry.parse_retry_after(value, NOW)
    assert parsed is None or (math.isfinite(parsed) and parsed >= 0)


def test_parse_retry_after_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match="timezone"):
        retry.parse_retry_after("5", datetime(2026, 1, 1))
