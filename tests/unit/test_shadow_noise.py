"""Unit tests of the noise model, rates and thresholds (shadow/noise.py, thresholds.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shadow import noise
from shadow.compare import ArmFacts, ContractBreak, PairComparison
from shadow.thresholds import DEFAULT_MARGINS, Thresholds

ARM = ArmFacts(status="completed")


def pair(measures: dict[str, float], breaks: int = 0, pair_id: str | None = None):
    found = tuple(ContractBreak(kind="type", path="$", control="string", candidate="number")
                  for _ in range(breaks))
    return PairComparison(pair_id=pair_id, control=ARM, candidate=ARM, breaks=found,
                          measures=measures)


@pytest.mark.parametrize(("count", "n", "low", "high"), [
    (0, 200, 0.0, 0.01884),
    (10, 100, 0.05523, 0.17437),
    (50, 50, 0.92865, 1.0),
])
def test_wilson_matches_reference_values(count, n, low, high):
    found = noise.wilson(count, n, 0.95)
    assert found == pytest.approx((low, high), abs=1e-4)


def test_wilson_edges():
    assert noise.wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        noise.wilson(3, 2)
    assert noise.rate(1, 4).value == 0.25


def test_quantile_is_the_higher_empirical_one():
    values = [float(v) for v in range(1, 101)]
    assert noise.quantile(values, 0.99) == (99.0, 99)
    assert noise.quantile(values[:50], 0.99) == (50.0, 50)
    assert noise.quantile([3.0], 0.5) == (3.0, 1)
    with pytest.raises(ValueError):
        noise.quantile([], 0.5)


def test_limits_are_baseline_quantile_plus_margin():
    baseline = noise.Baseline.from_pairs(pair({"image_color": float(v)}) for v in range(40))
    limit = baseline.limit("image_color", Thresholds())
    assert limit.baseline_value == 39.0
    assert limit.limit == 39.0 + DEFAULT_MARGINS["image_color"]
    assert limit.exceed_bound == pytest.approx(1 / 41)
    assert baseline.limit("file_bytes", Thresholds()) is None, "informational"


def test_a_small_baseline_falls_back_to_the_margins():
    baseline = noise.Baseline.from_pairs([pair({"text": 0.5})] * 3)
    limit = baseline.limit("text", Thresholds())
    assert limit.baseline_value is None and limit.limit == DEFAULT_MARGINS["text"]


def test_judge_reports_only_what_exceeds_the_spread():
    thresholds = Thresholds(margins={"text": 0.05})
    baseline = noise.Baseline.from_pairs(
        pair({"text": 0.1 + i / 1000, "image_color": 2.0}) for i in range(30)
    )
    quiet = noise.judge(pair({"text": 0.15, "image_color": 4.0}), baseline, thresholds)
    assert not quiet.differs
    loud = noise.judge(pair({"text": 0.3, "image_color": 30.0}, pair_id="p"), baseline,
                       thresholds)
    assert [f.measure for f in loud.findings] == ["image_color", "text"]
    assert loud.rank[1] == pytest.approx((30 - 5) / 255 + (0.3 - 0.179))
    broken = noise.judge(pair({}, breaks=1), baseline, thresholds)
    assert broken.differs and broken.rank > loud.rank


def test_contract_breach_needs_the_lower_bound_over_the_limit():
    thresholds = Thresholds(max_contract_break_rate=0.02)
    assert noise.contract_breach([pair({}, breaks=1)] + [pair({})] * 19, thresholds) is None
    reason = noise.contract_breach([pair({}, breaks=1)] * 3 + [pair({})] * 17, thresholds)
    assert reason is not None and "3 of 20" in reason
    assert noise.contract_breach([], thresholds) is None


@pytest.mark.parametrize("bad", [
    {"margins": {"colour": 1.0}},
    {"margins": {"text": -0.1}},
    {"baseline_quantile": 1.5},
    {"max_contract_break_rate": 2},
    {"confidence": 1.0},
    {"min_pairs": 0},
    {"surprise": 1},
])
def test_malformed_thresholds_are_refused_with_the_field_named(bad):
    with pytest.raises(ValidationError) as raised:
        Thresholds.model_validate(bad)
    assert next(iter(bad)) in str(raised.value)


def test_thresholds_round_trip_and_overrides():
    thresholds = Thresholds(margins={"image_phash": None, "text": 0.2})
    assert Thresholds.model_validate_json(thresholds.model_dump_json()) == thresholds
    assert thresholds.margin("image_phash") is None
    assert thresholds.margin("text") == 0.2
    assert thresholds.margin("image_color") == DEFAULT_MARGINS["image_color"]


@pytest.mark.parametrize(("n", "q", "expected"), [
    (100, 0.5, (40.0, 61.0)),     # the textbook ranks of a median's 95 % interval
    (72, 0.95, (64.0, 72.0)),     # 1 - 0.95**72 >= 0.975: the maximum bounds the p95
    (71, 0.95, (63.0, None)),     # one value fewer: nothing bounds it from above
    (0, 0.95, (None, None)),
])
def test_quantile_intervals_from_order_statistics(n, q, expected):
    values = [float(v) for v in range(1, n + 1)]
    assert noise.quantile_interval(values, q, 0.95) == expected
