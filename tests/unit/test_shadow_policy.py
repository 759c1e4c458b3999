"""Unit tests of the shadow input policy (shadow/policy.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shadow.policy import ShadowPolicy

POLICY = ShadowPolicy.model_validate({
    "allow_fields": ["prompt", "seed", "style", "steps"],
    "rules": [
        {"field": "prompt", "required": True, "type": "string", "max_length": 20},
        {"field": "seed", "type": "integer", "min": 0, "max": 1000},
        {"field": "style", "one_of": ["photo", "sketch"]},
        {"field": "steps", "pattern": "[0-9]+"},
    ],
    "max_input_bytes": 120,
})


@pytest.mark.parametrize("input_", [
    {"prompt": "a lake"},
    {"prompt": "a lake", "seed": 7, "style": "photo", "steps": "20"},
    {"prompt": "", "seed": 7.0},
])
def test_admitted_inputs(input_):
    assert POLICY.refusal(input_) is None and POLICY.admits(input_)


@pytest.mark.parametrize(("input_", "reason"), [
    ({"prompt": "x", "image": "https://private"}, "fields not allowed for shadowing: image"),
    ({"seed": 1}, "prompt is required"),
    ({"prompt": 3}, "prompt is not of type string"),
    ({"prompt": "x" * 21}, "prompt is longer than 20"),
    ({"prompt": "x", "seed": 1.5}, "seed is not of type integer"),
    ({"prompt": "x", "seed": True}, "seed is not of type integer"),
    ({"prompt": "x", "seed": 1001}, "seed is above 1000"),
    ({"prompt": "x", "style": "oil"}, "style is not one of the allowed values"),
    ({"prompt": "x", "steps": "20a"}, "steps does not match the pattern"),
    ({"prompt": "x", "steps": "9" * 120}, "input is larger than 120 bytes"),
])
def test_refused_inputs_name_the_field_not_the_value(input_, reason):
    assert POLICY.refusal(input_) == reason
    assert "private" not in reason


def test_an_empty_allow_list_admits_only_the_empty_input():
    policy = ShadowPolicy(allow_fields=())
    assert policy.admits({}) and not policy.admits({"prompt": "x"})


@pytest.mark.parametrize(("bad", "message"), [
    ({}, "allow_fields"),
    ({"allow_fields": ["a"], "rules": [{"field": "b"}]}, "not allowed: b"),
    ({"allow_fields": ["a"], "rules": [{"field": "a", "pattern": "("}]}, "valid regex"),
    ({"allow_fields": ["a"], "rules": [{"field": "a", "min": 2, "max": 1}]}, "above max"),
    ({"allow_fields": ["a"], "rules": [{"field": "a", "type": "text"}]}, "type"),
    ({"allow_fields": ["a"], "surprise": 1}, "surprise"),
    ({"allow_fields": ["a"], "max_input_bytes": 0}, "max_input_bytes"),
])
def test_a_malformed_policy_is_refused_with_a_clear_error(bad, message):
    with pytest.raises(ValidationError, match=message):
        ShadowPolicy.model_validate(bad)


def test_a_policy_round_trips_through_json():
    assert ShadowPolicy.model_validate_json(POLICY.model_dump_json()) == POLICY
