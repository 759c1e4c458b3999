"""The shape of a JSON output: types, keys and list lengths (docs/shadow.md, "Structure").

Pure functions over decoded JSON. Two outputs are walked side by side from the root
(``$``); each place where they differ in shape becomes one :class:`StructureDifference`:

- ``type``: the JSON types differ (``integer`` and ``number`` count as one type; a string
  equal to one of the side's file URLs has type ``file``);
- ``missing_key`` / ``extra_key``: an object key only the control / the candidate has;
- ``length``: two lists of different lengths (the common prefix is still compared).

A list made only of text strings (how Replicate language models stream tokens) is text,
not structure: its length is not compared, its joined text is (see :func:`text_of`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Set
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "MAX_DEPTH",
    "StructureDifference",
    "StructureResult",
    "compare_structure",
    "json_type",
    "strings_in_order",
    "text_of",
]

MAX_DEPTH = 64
"""Deeper values are compared by type only."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DifferenceKind = Literal["type", "missing_key", "extra_key", "length"]


class StructureDifference(BaseModel):
    """One place where the two outputs differ in shape.

    ``path`` is JSONPath-like (``$.images[2]``); ``control`` and ``candidate`` describe
    each side: a type name, a length, or ``"absent"``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DifferenceKind
    path: str
    control: str
    candidate: str


class StructureResult(BaseModel):
    """All shape differences, and how far apart the numbers at shared paths are.

    ``number_delta`` is the largest relative difference ``|a - b| / max(|a|, |b|)`` over
    numeric leaves at the same path (0 when equal, None when there is no such pair).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    differences: tuple[StructureDifference, ...] = ()
    number_delta: float | None = None

    @property
    def contract_differences(self) -> tuple[StructureDifference, ...]:
        """Type and key differences: the ones an app's parser would trip on."""
        return tuple(d for d in self.differences if d.kind != "length")

    @property
    def length_differences(self) -> tuple[StructureDifference, ...]:
        """List-length differences (quality drift, not a contract break)."""
        return tuple(d for d in self.differences if d.kind == "length")


def json_type(value: Any, file_urls: Set[str] = frozenset()) -> str:
    """The JSON type name of a decoded value.

    One of ``null``, ``boolean``, ``number`` (ints and floats alike), ``string``,
    ``file`` (a string in ``file_urls``), ``array``, ``object``; anything else is named
    by its Python type.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "file" if value in file_urls else "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_text_stream(value: Any, file_urls: Set[str] = frozenset()) -> bool:
    """Whether ``value`` is a non-empty list of text strings (none of them a file URL)."""
    return (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(isinstance(item, str) and item not in file_urls for item in value)
    )


def text_of(value: Any, file_urls: Set[str] = frozenset()) -> str:
    """All the text of an output, in document order, for a similarity measure.

    A text stream is joined with no separator (tokens carry their own spaces); other
    strings are joined with newlines; object values come in sorted key order. File URLs,
    numbers, booleans and nulls contribute nothing.
    """
    return "\n".join(part for part in _text_parts(value, file_urls, 0) if part)


def strings_in_order(value: Any) -> list[str]:
    """Every string of an output, in walk order (object keys sorted), file URLs included."""
    found: list[str] = []
    _collect_strings(value, found, 0)
    return found


def compare_structure(
    control: Any,
    candidate: Any,
    *,
    control_files: Set[str] = frozenset(),
    candidate_files: Set[str] = frozenset(),
) -> StructureResult:
    """Walk two decoded JSON outputs side by side.

    Parameters
    ----------
    control, candidate : Any
        Decoded JSON (``None``, bool, int, float, str, list, dict).
    control_files, candidate_files : set of str
        The file URLs of each side, so a file in one output and a file in the other have
        the same type although their URLs differ.

    Returns
    -------
    StructureResult
        Differences in walk order (keys sorted), and the largest relative difference
        between numbers found at the same path.
    """
    walk = _Walk(control_files, candidate_files)
    walk.visit(control, candidate, "$", 0)
    delta = max(walk.number_deltas) if walk.number_deltas else None
    return StructureResult(differences=tuple(walk.differences), number_delta=delta)


@dataclass
class _Walk:
    control_files: Set[str]
    candidate_files: Set[str]
    differences: list[StructureDifference] = field(default_factory=list)
    number_deltas: list[float] = field(default_factory=list)

    def visit(self, a: Any, b: Any, path: str, depth: int) -> None:
        type_a = json_type(a, self.control_files)
        type_b = json_type(b, self.candidate_files)
        if type_a != type_b:
            self.differences.append(StructureDifference(
                kind="type", path=path, control=type_a, candidate=type_b
            ))
        elif depth >= MAX_DEPTH:
            return
        elif type_a == "object":
            self._objects(a, b, path, depth)
        elif type_a == "array":
            self._arrays(a, b, path, depth)
        elif type_a == "number":
            self.number_deltas.append(_relative_delta(float(a), float(b)))

    def _objects(self, a: dict[str, Any], b: dict[str, Any], path: str, depth: int) -> None:
        for key in sorted(set(a) | set(b), key=str):
            child = _child_path(path, key)
            if key not in b:
                self.differences.append(StructureDifference(
                    kind="missing_key", path=child, control="present", candidate="absent"
                ))
            elif key not in a:
                self.differences.append(StructureDifference(
                    kind="extra_key", path=child, control="absent", candidate="present"
                ))
            else:
                self.visit(a[key], b[key], child, depth + 1)

    def _arrays(self, a: list[Any], b: list[Any], path: str, depth: int) -> None:
        if is_text_stream(a, self.control_files) and is_text_stream(b, self.candidate_files):
            return
        if len(a) != len(b):
            self.differences.append(StructureDifference(
                kind="length", path=path, control=str(len(a)), candidate=str(len(b))
            ))
        for index, (item_a, item_b) in enumerate(zip(a, b, strict=False)):
            self.visit(item_a, item_b, f"{path}[{index}]", depth + 1)


def _relative_delta(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)):
        return 0.0 if a == b or (math.isnan(a) and math.isnan(b)) else 1.0
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else min(1.0, abs(a - b) / scale)


def _child_path(path: str, key: object) -> str:
    text = str(key)
    if _IDENTIFIER.match(text):
        return f"{path}.{text}"
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{escaped}"]'


def _text_parts(value: Any, file_urls: Set[str], depth: int) -> Iterator[str]:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        if value not in file_urls:
            yield value
    elif is_text_stream(value, file_urls):
        yield "".join(value)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _text_parts(item, file_urls, depth + 1)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _text_parts(value[key], file_urls, depth + 1)


def _collect_strings(value: Any, found: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_strings(item, found, depth + 1)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _collect_strings(value[key], found, depth + 1)
