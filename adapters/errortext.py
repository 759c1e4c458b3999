"""Provider errors as apps and operators read them (docs/providers.md, "Error messages").

Every adapter builds the ``error`` of a failed snapshot with :func:`one_line`: one line of
at most :data:`MAX_ERROR_BYTES` (UTF-8), with ``data:`` URIs and long base64 runs
replaced by their size, so an error never carries the input a provider echoed back (fal's
422 ``detail`` items quote the offending ``input``; a refused image comes back whole).
:func:`fal_detail` renders fal's ``detail`` (a list of ``{loc, msg, type, input, ...}``
items, or a string) as ``field: message (type)``, without the echoed ``input``.
:func:`scrub_json` does the same to a JSON value kept for diagnosis (a stored webhook
body): echoed inputs dropped, ``data:`` payloads and base64 runs replaced.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ECHO_KEYS",
    "MAX_ERROR_BYTES",
    "MAX_KEPT_BODY_BYTES",
    "fal_detail",
    "kept_body",
    "one_line",
    "scrub",
    "scrub_json",
]

MAX_ERROR_BYTES = 1024
MAX_KEPT_BODY_BYTES = 16 * 1024
#: Keys under which providers echo the request's input back (fal's detail items, the
#: Replicate and RunPod job objects): dropped from what is kept.
ECHO_KEYS = frozenset({"input"})
_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)?[^,\s\"']*,[^\s\"'<>)\]}]*", re.IGNORECASE)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{120,}={0,2}")
_BASE64_BYTES = re.compile(rb"[A-Za-z0-9+/_-]{120,}")


def scrub(text: str) -> str:
    """``text`` with each ``data:`` URI and base64 run (120+ characters) replaced by a note
    of its size (``data:image/png (2048 bytes removed)``)."""

    def data_uri(match: re.Match[str]) -> str:
        return f"data:{match.group(1) or ''} ({len(match.group(0))} bytes removed)"

    text = _DATA_URI.sub(data_uri, text)
    return _BASE64_RUN.sub(lambda m: f"({len(m.group(0))} base64 characters removed)", text)


def one_line(text: str, limit_bytes: int = MAX_ERROR_BYTES) -> str:
    """``text`` scrubbed (:func:`scrub`), on one line, at most ``limit_bytes`` in UTF-8
    (cut with ``...``)."""
    flat = " ".join(scrub(text).split())
    data = flat.encode()
    if len(data) <= limit_bytes:
        return flat
    return data[: limit_bytes - 3].decode("utf-8", errors="ignore") + "..."


def fal_detail(detail: Any) -> str:
    """fal's ``detail`` as ``field: message (type)`` items joined by ``; ``.

    A list item's ``loc`` (``["body", "prompt"]``) names the field (``body`` dropped);
    its ``msg`` and ``type`` are fal's own words; ``input`` (the echoed value) and
    ``ctx`` are left out. A string detail is kept as it is; anything else is scrubbed
    JSON-ish text.
    """
    if isinstance(detail, str):
        return detail
    items = detail if isinstance(detail, list) else [detail]
    parts = []
    for item in items:
        if not isinstance(item, Mapping):
            parts.append(str(scrub_json(item)))
            continue
        loc = item.get("loc")
        path = [str(p) for p in loc if p != "body"] if isinstance(loc, list) else []
        msg = item.get("msg") or item.get("message") or "refused"
        kind = item.get("type")
        text = f"{'.'.join(path)}: {msg}" if path else str(msg)
        parts.append(f"{text} ({kind})" if kind else text)
    return "; ".join(parts)


def scrub_json(value: Any) -> Any:
    """A JSON value with :data:`ECHO_KEYS` dropped (at any depth) and every string
    scrubbed (:func:`scrub`)."""
    if isinstance(value, Mapping):
        return {k: scrub_json(v) for k, v in value.items() if k not in ECHO_KEYS}
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def kept_body(body: bytes, limit_bytes: int = MAX_KEPT_BODY_BYTES) -> bytes:
    """What is kept of a provider webhook body once it was applied: the body itself when
    it is small and carries no ``data:`` payload, base64 run or echoed input; else its
    JSON with :func:`scrub_json` applied (the text scrubbed, if not JSON), cut at
    ``limit_bytes`` with the size and SHA-256 of what was cut.
    """
    if (len(body) <= limit_bytes and b"data:" not in body and b'"input"' not in body
            and _BASE64_BYTES.search(body) is None):
        return body
    try:
        kept = json.dumps(scrub_json(json.loads(body)), separators=(",", ":")).encode()
    except ValueError:
        kept = scrub(body.decode("utf-8", errors="replace")).encode()
    if len(kept) <= limit_bytes:
        return kept
    head, rest = kept[: limit_bytes - 120], kept[limit_bytes - 120 :]
    note = f"...({len(rest)} more bytes cut, sha256 {hashlib.sha256(rest).hexdigest()})"
    return head + note.encode()
