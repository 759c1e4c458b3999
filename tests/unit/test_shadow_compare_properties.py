"""Property-based tests of a whole pair comparison on JSON outputs (shadow/compare.py)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from shadow import compare
from tests.support.shadow import completed, failed
from tests.unit.test_shadow_structure import JSON

MIRROR = {"status": "status", "type": "type", "key": "key"}


def run(control, candidate) -> compare.PairComparison:
    return asyncio.run(compare.compare(control, candidate))


@settings(max_examples=60, deadline=None)
@given(JSON)
def test_an_output_compared_with_itself_has_no_break_and_all_measures_zero(output):
    result = run(completed(output), completed(output))
    assert result.breaks == ()
    assert all(value == 0.0 for value in result.measures.values()), result.measures


@settings(max_examples=60, deadline=None)
@given(JSON, JSON)
def test_swapping_the_arms_mirrors_breaks_and_keeps_measures(a, b):
    forward, backward = run(completed(a), completed(b)), run(completed(b), completed(a))
    assert sorted((x.kind, x.path, x.control, x.candidate) for x in forward.breaks) == sorted(
        (x.kind, x.path, x.candidate, x.control) for x in backward.breaks
    )
    assert forward.measures.keys() == backward.measures.keys()
    for name, value in forward.measures.items():
        assert abs(value - backward.measures[name]) < 1e-9, name


@settings(max_examples=30, deadline=None)
@given(JSON, st.text(max_size=30))
def test_a_failed_arm_is_only_ever_a_status_break(output, error):
    result = run(completed(output), failed(error or "x"))
    assert [b.kind for b in result.breaks] == ["status"]
    assert result.measures == {}
