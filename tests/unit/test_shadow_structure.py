"""Property-based and example tests of the structure comparison (shadow/structure.py)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shadow.structure import compare_structure, json_type, text_of

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=12)
)
JSON = st.recursive(
    LEAVES,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)
MIRROR = {"missing_key": "extra_key", "extra_key": "missing_key", "type": "type",
          "length": "length"}


def leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths (tuples of keys / indexes) to every leaf (empty containers included)."""
    if isinstance(value, dict | list) and not value:
        return [path]
    if isinstance(value, dict):
        return [p for key, child in value.items() for p in leaf_paths(child, (*path, key))]
    if isinstance(value, list):
        return [p for i, child in enumerate(value) for p in leaf_paths(child, (*path, i))]
    return [path]


def replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(value)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copied


@settings(deadline=None)  # timing on a shared, busy machine is no signal
@given(JSON)
def test_a_value_has_no_structure_difference_with_itself(value):
    result = compare_structure(value, copy.deepcopy(value))
    assert result.differences == ()
    assert result.number_delta in (None, 0.0)


@settings(deadline=None)  # timing on a shared, busy machine is no signal
@given(JSON, JSON)
def test_the_comparison_is_symmetric(a, b):
    forward = compare_structure(a, b).differences
    backward = compare_structure(b, a).differences
    mirrored = sorted((MIRROR[d.kind], d.path, d.candidate, d.control) for d in forward)
    assert mirrored == sorted((d.kind, d.path, d.control, d.candidate) for d in backward)


def canonical(value: Any) -> Any:
    """The shape the comparison is specified to see: types, keys, lengths, text streams."""
    if isinstance(value, dict):
        return {key: canonical(child) for key, child in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(item, str) for item in value):
            return "text-stream"
        return [canonical(child) for child in value]
    return json_type(value)


@settings(deadline=None)  # timing on a shared, busy machine is no signal
@given(JSON, JSON)
def test_no_difference_exactly_when_the_canonical_shapes_are_equal(a, b):
    assert (compare_structure(a, b).differences == ()) == (canonical(a) == canonical(b))


@settings(max_examples=200, deadline=None)
@given(JSON, st.data())
def test_changing_one_leaf_to_another_type_is_one_type_difference(value, data):
    paths = leaf_paths(value)
    path = data.draw(st.sampled_from(paths))
    old = value
    for step in path:
        old = old[step]
    new = {"replaced": True} if not isinstance(old, dict) else 1
    changed = replace(value, path, new)
    differences = compare_structure(value, changed).differences
    types = [d for d in differences if d.kind == "type"]
    assert len(types) == 1
    assert types[0].control == json_type(old)
    assert types[0].candidate == json_type(new)
    # and nothing else unless the leaf sat in a list of strings (a text stream)
    assert len(differences) == 1


@settings(deadline=None)  # timing on a shared, busy machine is no signal
@given(JSON, st.data())
def test_changing_a_leaf_within_its_type_is_no_structure_difference(value, data):
    paths = leaf_paths(value)
    path = data.draw(st.sampled_from(paths))
    old = value
    for step in path:
        old = old[step]
    if isinstance(old, bool) or old is None:
        new = old
    elif isinstance(old, int | float):
        new = old + 1
    elif isinstance(old, str):
        new = old + "x"
    else:
        new = old
    assert compare_structure(value, replace(value, path, new)).differences == ()


@settings(deadline=None)  # timing on a shared, busy machine is no signal
@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=8),
       st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=8))
def test_token_streams_are_text_not_structure(a, b):
    result = compare_structure(a, b)
    assert result.differences == ()
    assert text_of(a) == "".join(a)


def test_examples_of_each_kind_with_paths():
    control = {"images": [1, 2, 3], "meta": {"seed": 1, "weird key": "x"}, "caption": "a"}
    candidate = {"images": [1, 2], "meta": {"seed": "1"}, "caption": "b", "extra": None}
    found = {(d.kind, d.path, d.control, d.candidate)
             for d in compare_structure(control, candidate).differences}
    assert found == {
        ("extra_key", "$.extra", "absent", "present"),
        ("length", "$.images", "3", "2"),
        ("type", "$.meta.seed", "number", "string"),
        ("missing_key", '$.meta["weird key"]', "present", "absent"),
    }


def test_file_urls_are_files_whatever_their_text():
    result = compare_structure(
        ["https://a/1.png"], ["https://b/2.png"],
        control_files={"https://a/1.png"}, candidate_files={"https://b/2.png"},
    )
    assert result.differences == ()
    assert compare_structure(
        "https://a/1.png", "https://b/2.png", control_files={"https://a/1.png"}
    ).differences[0].kind == "type"
    assert text_of(["https://a/1.png", "caption"], {"https://a/1.png"}) == "caption"


def test_numbers_report_their_largest_relative_difference():
    result = compare_structure({"a": 100, "b": [1.0, 0]}, {"a": 90, "b": [1.0, 0]})
    assert result.number_delta == 0.1
    assert compare_structure("x", "y").number_delta is None
    assert compare_structure(float("inf"), 1.0).number_delta == 1.0
