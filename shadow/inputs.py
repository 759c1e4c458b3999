"""What a report shows of a pair's input (docs/shadow.md, "The report"): the prediction's
``input`` as indented JSON, at most :data:`INPUT_CHARS` characters, with each inline
``data:`` URI replaced by its media type and size (a 3 MB image is not copied into every
comparison row), and the http(s) URLs in it, to link to.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["INPUT_CHARS", "input_excerpt", "input_links"]

INPUT_CHARS = 4_000
"""Characters of the input excerpt at most (the page folds it beyond a screenful)."""

_DATA_URI = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?[^,]*,")
_URL = re.compile(r"https?://[^\s\"'<>]+")


def input_excerpt(value: Any) -> str:
    """The input as JSON text for display; ``""`` for no input."""
    if value is None:
        return ""
    text = json.dumps(_shown(value, 0), ensure_ascii=False, indent=1, default=str)
    return text if len(text) <= INPUT_CHARS else text[: INPUT_CHARS - 1] + "…"


def input_links(excerpt: str) -> tuple[str, ...]:
    """The distinct http(s) URLs in an excerpt, in order."""
    return tuple(dict.fromkeys(_URL.findall(excerpt)))


def _shown(value: Any, depth: int) -> Any:
    if depth > 32:
        return "…"
    if isinstance(value, str):
        found = _DATA_URI.match(value)
        if found:
            return f"<{found.group(1) or 'data'} data: URI, {len(value)} characters>"
        return value
    if isinstance(value, dict):
        return {str(key): _shown(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item, depth + 1) for item in value]
    return value
