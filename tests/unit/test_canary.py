"""The sticky canary draw (gateway/rollout/canary.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.rollout import canary
from gateway.rollout.spec import CallerKey, parse_caller_key

ROUTE = "acme/echo"
CALLERS = [f"token:caller-{i}" for i in range(1000)]


def test_fifty_percent_sends_half_of_a_thousand_callers_to_the_candidate():
    arms = {c: canary.choose_arm(ROUTE, c, 50) for c in CALLERS}
    share = sum(a == "candidate" for a in arms.values()) / len(CALLERS)
    assert 0.45 <= share <= 0.55
    # each caller always gets the same arm
    assert all(canary.choose_arm(ROUTE, c, 50) == arms[c] for c in CALLERS for _ in range(3))
    # raising to 60 % moves nobody back to control
    at_60 = {c: canary.choose_arm(ROUTE, c, 60) for c in CALLERS}
    assert not [c for c in CALLERS if arms[c] == "candidate" and at_60[c] == "control"]
    assert sum(a == "candidate" for a in at_60.values()) > sum(
        a == "candidate" for a in arms.values()
    )


@given(
    caller=st.text(min_size=1, max_size=40),
    low=st.floats(min_value=0, max_value=100),
    high=st.floats(min_value=0, max_value=100),
)
def test_raising_the_percent_never_moves_a_caller_back(caller: str, low: float, high: float):
    low, high = sorted((low, high))
    if canary.choose_arm(ROUTE, caller, low) == "candidate":
        assert canary.choose_arm(ROUTE, caller, high) == "candidate"


@given(caller=st.text(max_size=40))
def test_the_ends_are_all_or_nothing(caller: str):
    assert canary.choose_arm(ROUTE, caller, 0) == "control"
    assert canary.choose_arm(ROUTE, caller, 100) == "candidate"


def test_caller_identity_uses_the_configured_source_and_falls_back_to_the_token():
    headers = {"X-User": "u1"}
    data = {"user": "alice", "n": 3}
    by_token = canary.caller_identity(CallerKey(), token="r8_a", headers=headers, data=data)
    assert by_token.startswith("token:") and "r8_a" not in by_token
    header = parse_caller_key("header:X-User")
    assert canary.caller_identity(header, token="r8_a", headers=headers, data=data) == "header:u1"
    assert canary.caller_identity(header, token="r8_a", headers={}, data=data) == by_token
    field = parse_caller_key("input:user")
    assert canary.caller_identity(field, token="r8_a", headers={}, data=data) == "input:alice"
    assert canary.caller_identity(field, token="r8_a", headers={}, data={}) == by_token


def test_shadow_sampling_is_a_share_of_predictions():
    picked = sum(canary.sampled(ROUTE, f"p{i}", 10) for i in range(5000))
    assert 400 <= picked <= 600
    assert not canary.sampled(ROUTE, "p1", 0)
    assert canary.sampled(ROUTE, "p1", 100)


def test_only_sampled_control_predictions_with_admitted_input_are_shadowed():
    from gateway.rollout.spec import RouteSpec

    spec = RouteSpec(provider="a", candidate="b", shadow_percent=100, baseline_percent=0,
                     shadow_policy={"allow_fields": ["prompt"]})
    assert canary.shadow_arm(ROUTE, spec, "control", "p1", {"prompt": "x"}) == "shadow"
    assert canary.shadow_arm(ROUTE, spec, "candidate", "p1", {"prompt": "x"}) is None
    assert canary.shadow_arm(ROUTE, spec, "control", "p1", {"prompt": "x", "seed": 1}) is None
    off = spec.model_copy(update={"shadow_percent": 0.0})
    assert canary.shadow_arm(ROUTE, off, "control", "p1", {"prompt": "x"}) is None
    no_policy = spec.model_copy(update={"shadow_policy": None})
    assert canary.shadow_arm(ROUTE, no_policy, "control", "p1", {"prompt": "x"}) is None
    both = spec.model_copy(update={"baseline_percent": 30.0})
    arms = [canary.shadow_arm(ROUTE, both, "control", f"p{i}", {"prompt": "x"})
            for i in range(2000)]
    assert 0.25 <= arms.count("baseline") / len(arms) <= 0.35
