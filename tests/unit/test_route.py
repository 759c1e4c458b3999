"""Route specs, guard thresholds and shadow policies refuse malformed values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.rollout.spec import GuardSettings, RouteSpec, parse_caller_key


@pytest.mark.parametrize("percent", [-1, 101, "lots"])
def test_percent_out_of_range_is_refused(percent):
    with pytest.raises(ValidationError):
        RouteSpec(provider="a", candidate="b", canary_percent=percent)


def test_a_canary_needs_another_provider():
    with pytest.raises(ValidationError, match="needs a candidate"):
        RouteSpec(provider="a", canary_percent=10)
    with pytest.raises(ValidationError, match="another provider"):
        RouteSpec(provider="a", candidate="a")


@pytest.mark.parametrize(
    "guard",
    [{}, {"max_error_rate": 2}, {"max_error_rate": 0.1, "min_samples": 0},
     {"max_p95_ratio": -1}, {"max_error_rate": 0.1, "window_s": 0}, {"max_error_rate": "x"},
     {"max_error_rate": 0.1, "bogus": 1}],
)
def test_malformed_guard_thresholds_are_refused(guard):
    with pytest.raises(ValidationError):
        GuardSettings(**guard)


@pytest.mark.parametrize("text", ["", "tokens", "header:", "header:bad name", "input:1x", "x:y"])
def test_malformed_caller_keys_are_refused(text):
    with pytest.raises(ValueError):
        parse_caller_key(text)


def test_caller_key_round_trips_through_the_stored_form():
    spec = RouteSpec(provider="a", caller_key="header:X-User")
    assert spec.stored()["caller_key"] == "header:X-User"
    assert RouteSpec.model_validate(spec.stored()) == spec


def test_a_route_without_a_policy_shadows_nothing_and_bad_policies_are_refused():
    assert RouteSpec(provider="a").shadow_policy is None
    spec = RouteSpec(provider="a", candidate="b",
                     shadow_policy={"allow_fields": ["prompt"], "max_input_bytes": 100})
    assert spec.shadow_policy is not None and spec.shadow_policy.admits({"prompt": "x"})
    assert RouteSpec.model_validate(spec.stored()) == spec
    for bad in ({"allow_fields": ["a"], "rules": [{"field": "b", "max": 1}]},
                {"fields": ["a"]}, {"allow_fields": ["a"], "max_input_bytes": 0}):
        with pytest.raises(ValidationError):
            RouteSpec(provider="a", shadow_policy=bad)
