"""The console's guard state, from the same figures the admin API shows (docs/console.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.http.console.views import change_summary, guard_view

GUARD = {"max_error_rate": 0.2, "max_p95_ratio": 2.0, "min_samples": 10}


def _arm(count: int, failed: int = 0, stuck: int = 0, p95: float | None = 0.5) -> dict[str, Any]:
    judged = count + stuck
    rate = (failed + stuck) / judged if judged else None
    return {"provider": "p", "count": count, "failed": failed, "stuck": stuck,
            "error_rate": rate, "p50_s": p95, "p95_s": p95}


def _shown(candidate: dict[str, Any], *, canary: float = 10, guard: Any = GUARD,
           paused: bool = False, control: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"provider": "old", "candidate": "new", "canary_percent": canary, "guard": guard}
    if paused:
        spec["guard_paused"] = True
    return {"spec": spec, "arms": {"control": control or _arm(50), "candidate": candidate}}


@pytest.mark.parametrize(
    ("shown", "state"),
    [
        (_shown(_arm(20), guard=None), "off"),
        (_shown(_arm(20, failed=20), paused=True), "paused"),
        (_shown(_arm(20, failed=20), canary=0), "idle"),
        (_shown(_arm(5, failed=5)), "collecting"),
        (_shown(_arm(20, failed=1)), "ok"),
        (_shown(_arm(8, failed=0, stuck=4)), "breach"),  # stuck ones are failed samples
        (_shown(_arm(20, p95=3.0)), "breach"),  # 6x the control's p95
    ],
)
def test_the_guard_state_is_what_the_guard_would_do(shown: dict[str, Any], state: str) -> None:
    assert guard_view(shown).state == state


def test_a_breach_gives_the_guards_own_reason_and_the_failing_check() -> None:
    view = guard_view(_shown(_arm(20, failed=10)))
    assert "candidate error rate 50.0% > 20.0% (10 of 20)" in view.detail
    assert [c.ok for c in view.checks if c.name == "Error rate"] == [False]


def test_an_idle_guard_passes_no_verdict() -> None:
    assert {c.ok for c in guard_view(_shown(_arm(0), canary=0)).checks} == {None}


def test_a_change_lists_the_fields_it_moved() -> None:
    change = {"before": {"canary_percent": 0.0, "provider": "a"},
              "after": {"canary_percent": 10.0, "provider": "a", "guard_paused": True}}
    assert change_summary(change) == [("canary_percent", "0", "10"),
                                      ("guard_paused", "\u2013", "yes")]
    assert change_summary({"before": None, "after": {}}) == []
