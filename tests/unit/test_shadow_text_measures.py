"""The text and JSON measures of language-model outputs (docs/shadow.md, "Text measures")."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shadow.text_measures import key_paths, text_measures


def test_equal_texts_measure_zero_and_json_is_only_measured_when_it_looks_like_json() -> None:
    assert text_measures("Hello world", "Hello world  ") == {
        "text_exact": 0.0, "text_edit": 0.0, "text_length": 0.0}
    assert text_measures("", "") == {}


def test_a_changed_word_is_an_inexact_match_with_its_edit_distance_and_length_ratio() -> None:
    found = text_measures("the cat sat", "the cat sat down")
    assert found["text_exact"] == 1.0
    assert found["text_edit"] == pytest.approx(5 / 16)
    assert found["text_length"] == pytest.approx(1 - 11 / 16)


def test_json_validity_and_key_sets_are_compared() -> None:
    control = json.dumps({"name": "a", "tags": [{"id": 1}]})
    assert text_measures(control, json.dumps({"tags": [{"id": 2}], "name": "b"}))[
        "json_keys"] == 0.0
    renamed = text_measures(control, json.dumps({"title": "a", "tags": [{"id": 1}]}))
    assert renamed["json_valid"] == 0.0
    assert renamed["json_keys"] == pytest.approx(1 - 2 / 4)  # $.tags, $.tags[].id shared
    broken = text_measures(control, '{"name": "a", "tags": [')
    assert broken["json_valid"] == 1.0 and "json_keys" not in broken
    assert text_measures("null", "[1]")["json_valid"] == 0.0  # both valid JSON


def test_key_paths_name_nested_keys_and_list_items() -> None:
    assert key_paths({"a": {"b": 1}, "c": [{"d": 2}, {"e": 3}]}) == {
        "$.a", "$.a.b", "$.c", "$.c[].d", "$.c[].e"}


@given(st.text(max_size=40), st.text(max_size=40))
def test_every_measure_is_between_0_and_1_and_0_on_identical_text(a: str, b: str) -> None:
    for value in text_measures(a, b).values():
        assert 0.0 <= value <= 1.0
    assert set(text_measures(a, a).values()) <= {0.0}
