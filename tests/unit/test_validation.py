"""Input validation against a Cog model's schema (gateway/validation.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from contracts.errors import ConfigurationError
from gateway.validation import InputInvalid, InputValidator, load_schema, noted_logs
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
    ],
)
def test_bad_inputs_name_the_field(value: dict, named: str) -> None:
    with pytest.raises(InputInvalid) as caught:
        InputValidator(ECHO_OPENAPI_SCHEMA).check(value)
    assert named in caught.value.detail
    assert caught.value.status == 422


def test_good_input_passes() -> None:
    checked = InputValidator(ECHO_OPENAPI_SCHEMA).check({"prompt": "hi", "steps": 3})
    assert checked.input == {"prompt": "hi", "steps": 3} and checked.note is None


def test_undeclared_fields_are_dropped_and_named() -> None:
    checked = InputValidator(ECHO_OPENAPI_SCHEMA).check(
        {"prompt": "hi", "stream": True, "max_length": 64}
    )
    assert checked.input == {"prompt": "hi"}
    assert checked.dropped == ("max_length", "stream")
    assert checked.note == "Stripped unknown input fields: max_length, stream\n"


def test_a_dropped_field_does_not_excuse_a_wrong_type() -> None:
    with pytest.raises(InputInvalid, match=r"input\.steps: 'x' is not of type 'integer'"):
        InputValidator(ECHO_OPENAPI_SCHEMA).check({"prompt": "hi", "steps": "x", "stream": 1})


def test_strict_inputs_refuse_undeclared_fields() -> None:
    with pytest.raises(InputInvalid) as caught:
        InputValidator(ECHO_OPENAPI_SCHEMA).check({"prompt": "x", "colour": "red"}, strict=True)
    assert "input.colour: is not an input of this model" in caught.value.detail


def test_a_schema_allowing_more_fields_keeps_them() -> None:
    document = copy.deepcopy(ECHO_OPENAPI_SCHEMA)
    document["components"]["schemas"]["Input"]["additionalProperties"] = True
    checked = InputValidator(document).check({"prompt": "x", "extra": 1}, strict=True)
    assert checked.input == {"prompt": "x", "extra": 1} and checked.dropped == ()


def test_the_note_stays_first_in_the_provider_logs() -> None:
    note = "Stripped unknown input fields: stream\n"
    assert noted_logs(note, "step 1/2\n") == note + "step 1/2\n"
    assert noted_logs(note + "step 1/2\n", note + "step 1/2\n") == note + "step 1/2\n"
    assert noted_logs(note, None) is None
    assert noted_logs("step 1\n", "step 2\n") == "step 2\n"


def test_cog_choices_by_reference() -> None:
    validator = InputValidator(COG_CHOICES)
    validator.check({"prompt": "x", "kind": "b", "image": "data:text/plain;base64,aGk="})
    with pytest.raises(InputInvalid, match=r"input\.kind: 'c' is not one of"):
        validator.check({"prompt": "x", "kind": "c"})


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(InputInvalid) as caught:
        InputValidator(ECHO_OPENAPI_SCHEMA).check({"steps": -1, "extra": 1}, strict=True)
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
