"""Fair dispatch order across API tokens, with route priority (gateway/fairness.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gateway.fairness import Candidate, fair_order

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def jobs(owner: str, n: int, start: int = 0, priority: int = 0) -> list[Candidate]:
    return [Candidate(f"{owner}{i}", owner, priority, T0 + timedelta(seconds=start + i))
            for i in range(n)]


def test_a_flooding_token_does_not_starve_the_others() -> None:
    flood = jobs("a", 100)
    late = jobs("b", 2, start=500) + jobs("c", 1, start=600)
    order = [c.owner for c in fair_order(flood + late, {}, 6)]
    assert order == ["a", "b", "c", "a", "b", "a"]


def test_the_token_served_least_recently_goes_first() -> None:
    order = fair_order(jobs("a", 3) + jobs("b", 3, start=10), {"a": 5.0, "b": 1.0}, 2)
    assert [c.id for c in order] == ["b0", "a0"]


def test_priority_comes_first_and_order_within_a_token_holds() -> None:
    order = fair_order(jobs("a", 3) + jobs("b", 2, start=50, priority=5), {}, 5)
    assert [c.id for c in order] == ["b0", "b1", "a0", "a1", "a2"]
