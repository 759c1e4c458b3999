"""Input validation against a Cog model's schema (gateway/validation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.errors import ConfigurationError
from gateway.validation import InputInvalid, InputValidator, load_schema
from tests.support.fixtures import ECHO_OPENAPI_SCHEMA

# What Cog writes for `choices`: the enum lives in its own schema, reached by allOf/$ref.
COG_CHOICES = {
    "components": {
        "schemas": {
            "Input": {
                "type": "object",
                "required": ["prompt"],
                "properties": {
                    "prompt": {"type": "string"},
                    "kind": {"allOf": [{"$ref": "#/components/schemas/kind"}], "default": "a"},
                    "image": {"type": "string", "format": "uri"},
                },
            },
            "kind": {"title": "kind", "enum": ["a", "b"], "type": "string"},
        }
    }
}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"prompt": 3}, "input.prompt: 3 is not of type 'string'"),
        ({"prompt": "x", "steps": 2000}, "input.steps: 2000 is greater than the maximum of 1000"),
        ({"prompt": "x", "output_kind": "gif"}, "input.output_kind: 'gif' is not one of"),
        ({}, "input.prompt: is required"),
        ({"prompt": "x", "colour": "red"}, "input.colour: is not an input of this model"),
    ],
)
def test_bad_inputs_name_the_field(value: dict, named: str) -> None:
    with pytest.raises(InputInvalid) as caught:
        InputValidator(ECHO_OPENAPI_SCHEMA).check(value)
    assert named in caught.value.detail
    assert caught.value.status == 422


def test_good_input_passes() -> None:
    InputValidator(ECHO_OPENAPI_SCHEMA).check({"prompt": "hi", "steps": 3})


def test_cog_choices_by_reference() -> None:
    validator = InputValidator(COG_CHOICES)
    validator.check({"prompt": "x", "kind": "b", "image": "data:text/plain;base64,aGk="})
    with pytest.raises(InputInvalid, match=r"input\.kind: 'c' is not one of"):
        validator.check({"prompt": "x", "kind": "c"})


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(InputInvalid) as caught:
        InputValidator(ECHO_OPENAPI_SCHEMA).check({"steps": -1, "extra": 1})
    detail = caught.value.detail
    assert "input.prompt" in detail and "input.steps" in detail and "input.extra" in detail


def test_schema_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(ECHO_OPENAPI_SCHEMA))
    assert load_schema(str(path)) == ECHO_OPENAPI_SCHEMA
    with pytest.raises(ConfigurationError):
        load_schema(str(tmp_path / "missing.json"))


def test_a_schema_without_input_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        InputValidator({"components": {"schemas": {}}})
