"""The guard's judgement over samples (gateway/rollout/guard.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.rollout import guard
from gateway.rollout.spec import GuardSettings


def _arm(n: int, failed: int = 0, latency_s: float = 1.0, arm: str = "control") -> guard.ArmStats:
    return guard.summarize(
        guard.Sample(arm=arm, failed=i < failed, latency_s=latency_s) for i in range(n)
    )


def test_error_rate_over_the_threshold_is_a_breach_with_its_samples():
    settings = GuardSettings(max_error_rate=0.2, min_samples=10)
    breach = guard.evaluate(settings, _arm(50), _arm(20, failed=10, arm="candidate"))
    assert breach is not None
    assert "error rate 50.0% > 20.0%" in breach.reason
    assert breach.evidence["candidate"]["failed"] == 10
    assert breach.evidence["control"]["count"] == 50


def test_too_few_samples_are_not_judged():
    settings = GuardSettings(max_error_rate=0.2, min_samples=10)
    assert guard.evaluate(settings, _arm(50), _arm(9, failed=9)) is None


def test_stuck_predictions_count_as_failed_samples_of_the_error_rate_only():
    settings = GuardSettings(max_error_rate=0.3, min_samples=5, max_queue_s=10)
    finished = guard.Sample(arm="candidate", failed=False, latency_s=1.0)
    assert guard.evaluate(settings, _arm(50), guard.summarize([], stuck=4)) is None  # < 5
    candidate = guard.summarize([finished] * 3, stuck=2)
    assert (candidate.count, candidate.stuck, candidate.error_rate) == (3, 2, 0.4)
    breach = guard.evaluate(settings, _arm(50), candidate)
    assert breach is not None
    assert breach.reason == (
        "candidate error rate 40.0% > 30.0% (2 of 5; 2 not taken by the provider within 10 s)"
    )
    latency = GuardSettings(max_p95_ratio=2.0, min_samples=5)  # judged over finished ones
    assert guard.evaluate(latency, _arm(10), guard.summarize([finished], stuck=9)) is None


def test_p95_ratio_needs_both_arms():
    settings = GuardSettings(max_p95_ratio=2.0, min_samples=5)
    slow = _arm(10, latency_s=5.0)
    assert guard.evaluate(settings, _arm(10, latency_s=1.0), slow) is not None
    assert guard.evaluate(settings, _arm(4, latency_s=1.0), slow) is None
    assert guard.evaluate(settings, _arm(10, latency_s=3.0), slow) is None


def test_contract_breaks_count_as_a_breach_when_the_guard_asks():
    settings = GuardSettings(max_contract_break_rate=0.05, min_samples=10)
    ok = _arm(10)
    assert guard.evaluate(settings, ok, ok, guard.PairStats(pairs=20, breaks=1)) is None
    found = guard.PairStats(pairs=20, breaks=9, breach="contract breaks in 9 of 20")
    breach = guard.evaluate(settings, ok, ok, found)
    assert breach is not None and breach.reason == "shadow contract breaks in 9 of 20"
    assert breach.evidence["shadow_pairs"] == {"pairs": 20, "breaks": 9}
    without = GuardSettings(max_error_rate=0.5)
    assert guard.evaluate(without, ok, ok, found) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
def test_percentile_is_one_of_the_values_and_ordered(values: list[float]):
    p50, p95 = guard.percentile(values, 0.5), guard.percentile(values, 0.95)
    assert p50 in values and p95 in values
    assert min(values) <= p50 <= p95 <= max(values)
