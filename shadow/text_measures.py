"""Measures for the text and JSON outputs of language models (docs/shadow.md, "Text
measures").

Pure functions over the two arms' output text (:func:`shadow.structure.text_of` plus
text files, as :mod:`shadow.compare` joins them). Each measure is 0 when the arms agree;
like every measure it is judged against the control-vs-control baseline
(:mod:`shadow.noise`), so a nondeterministic model's own spread is not reported:

- ``text_exact``: 1 when the texts differ at all (after stripping outer white space),
  else 0; its mean over pairs is ``1 - exact match rate``;
- ``text_edit``: normalised Levenshtein distance of the texts, ``distance / max(len)``
  (0-1, by characters, first :data:`MAX_CHARS` of each; rapidfuzz);
- ``text_length``: ``1 - min(len) / max(len)`` of the texts in characters (0-1);
- ``json_valid``: 1 when exactly one arm's text parses as JSON; only measured when at
  least one text looks like a JSON object or array (starts with ``{`` or ``[``);
- ``json_keys``: ``1 - shared / all`` (Jaccard) of the key paths (``$.a.b``, list items as
  ``[]``) of two texts that both parse as JSON objects or arrays (0-1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["TEXT_MEASURES", "key_paths", "text_measures"]

TEXT_MEASURES: dict[str, str] = {
    "text_exact": "texts differ at all (0 or 1; mean = 1 - exact match rate)",
    "text_edit": "normalised Levenshtein distance of the texts (0-1)",
    "text_length": "1 - shorter / longer text length (0-1)",
    "json_valid": "exactly one arm's text is valid JSON (0 or 1)",
    "json_keys": "1 - Jaccard agreement of the JSON key paths (0-1)",
}
"""The text measures, with their units (merged into :data:`shadow.measures.MEASURES`)."""

MAX_CHARS = 20_000
"""Characters of each text measured (the edit distance is quadratic at worst)."""

MAX_KEY_PATHS = 10_000
"""Key paths collected per side at most (a huge JSON output is compared on its first)."""


def text_measures(control: str, candidate: str) -> dict[str, float]:
    """The measures of two output texts, by name; ``{}`` when both are empty."""
    from rapidfuzz.distance import Levenshtein

    a, b = control.strip(), candidate.strip()
    if not a and not b:
        return {}
    exact = a == b
    a, b = a[:MAX_CHARS], b[:MAX_CHARS]
    longer = max(len(a), len(b))
    found = {
        "text_exact": 0.0 if exact else 1.0,
        "text_edit": Levenshtein.normalized_distance(a, b),
        "text_length": 1.0 - min(len(a), len(b)) / longer,
    }
    if _looks_like_json(a) or _looks_like_json(b):
        (valid_a, parsed_a), (valid_b, parsed_b) = _parse(a), _parse(b)
        found["json_valid"] = 0.0 if valid_a == valid_b else 1.0
        if isinstance(parsed_a, dict | list) and isinstance(parsed_b, dict | list):
            keys_a, keys_b = key_paths(parsed_a), key_paths(parsed_b)
            union = keys_a | keys_b
            found["json_keys"] = 1.0 - len(keys_a & keys_b) / len(union) if union else 0.0
    return found


def key_paths(value: Any) -> frozenset[str]:
    """Every object key path in a decoded JSON value (``$.a``, ``$.items[].id``)."""
    found: set[str] = set()
    for path in _walk(value, "$", 0):
        found.add(path)
        if len(found) >= MAX_KEY_PATHS:
            break
    return frozenset(found)


def _walk(value: Any, path: str, depth: int) -> Iterator[str]:
    if depth > 64:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}"
            yield child
            yield from _walk(item, child, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, f"{path}[]", depth + 1)


def _looks_like_json(text: str) -> bool:
    return text[:1] in ("{", "[")


def _parse(text: str) -> tuple[bool, Any]:
    """Whether the text is JSON, and its decoded value (None when it is not)."""
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None
