"""Output conformance against the model's ``Output`` schema (gateway/translation/conformance.py,
docs/translation.md "Output conformance")."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.translation.conformance import OutputMismatch, conform, interim, output_schema

URIS = {"type": "array", "items": {"type": "string", "format": "uri"}}
ONE_URI = {"type": "string", "format": "uri"}
TEXT = {"type": "string"}
ITERATOR = {"type": "array", "items": {"type": "string"}, "x-cog-array-type": "iterator",
            "x-cog-array-display": "concatenate"}


@pytest.mark.parametrize(
    ("schema", "output", "named"),
    [
        (URIS, None, "the provider returned no output (the model declares a list of URIs)"),
        (ITERATOR, [{"error": "boom"}], "output[0] is an object where the model declares a "
                                        "string"),
        (ITERATOR, ["a", {"error": "boom"}], "output[1] is an object"),
        (ONE_URI, ["https://x/1.png", "https://x/2.png"],
         "the provider returned a list of 2 files where the model declares one URI"),
        (URIS, "https://x/1.png", "output is a string where the model declares a list of URIs"),
        (TEXT, {"text": "hi"}, "output is an object where the model declares a string"),
        ({"type": "integer"}, True, "output is a boolean where the model declares an integer"),
        ({"type": "object", "required": ["seed"], "properties": {"seed": {"type": "integer"}}},
         {"images": []}, "output.seed is missing"),
    ],
)
def test_a_mismatch_names_it_in_one_line(schema: dict[str, Any], output: Any, named: str) -> None:
    with pytest.raises(OutputMismatch) as caught:
        conform(schema, output)
    assert named in caught.value.detail
    assert "\n" not in caught.value.detail


@pytest.mark.parametrize(
    ("schema", "output", "conformed"),
    [
        (URIS, ["https://x/1.png"], ["https://x/1.png"]),
        (ONE_URI, ["https://x/1.png"], "https://x/1.png"),  # one file stays one FileOutput
        (ONE_URI, "data:image/png;base64,AA==", "data:image/png;base64,AA=="),
        (TEXT, ["Hel", "lo"], "Hello"),  # streamed text joined where a string is declared
        (ITERATOR, ["Hel", "lo"], ["Hel", "lo"]),
        ({"type": "string", "nullable": True}, None, None),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None, None),
        ({"type": ["array", "null"], "items": {"type": "string"}}, None, None),
        ({"title": "Output"}, None, None),  # Cog's -> Any
        ({"title": "Output"}, {"any": "thing"}, {"any": "thing"}),
        ({}, [1, "two"], [1, "two"]),
        (None, None, None),
        ({"type": "number"}, 3, 3),
    ],
)
def test_conforming_outputs_keep_or_take_the_declared_shape(
    schema: dict[str, Any] | None, output: Any, conformed: Any
) -> None:
    assert conform(schema, output) == conformed


@given(st.lists(st.text()))
def test_streamed_text_joins_to_the_whole_text(chunks: list[str]) -> None:
    assert conform(TEXT, chunks) == "".join(chunks)


def test_interim_text_chunks_wait_for_the_joined_string() -> None:
    assert interim(TEXT, ["Hel"]) is None
    assert interim(ITERATOR, ["Hel"]) == ["Hel"]
    assert interim(None, ["Hel"]) == ["Hel"]


def test_output_schema_follows_cog_references() -> None:
    document = {"components": {"schemas": {
        "Output": {"$ref": "#/components/schemas/ModelOutput"},
        "ModelOutput": {"type": "object", "required": ["text"],
                        "properties": {"text": {"allOf": [{"$ref": "#/components/schemas/T"}]}}},
        "T": {"type": "string"},
    }}}
    schema = output_schema(document)
    assert conform(schema, {"text": "ok"}) == {"text": "ok"}
    with pytest.raises(OutputMismatch, match=r"output\.text is an integer"):
        conform(schema, {"text": 1})
    assert output_schema({"components": {"schemas": {}}}) is None
    assert output_schema(None) is None
