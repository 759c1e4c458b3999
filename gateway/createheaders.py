"""The create headers that shape a prediction's time: ``Prefer: wait`` and
``Cancel-After`` (docs/replicate-api.md §3.2), parsed without HTTP."""

from __future__ import annotations

import math
import re

from contracts.errors import ContractViolation

__all__ = ["MIN_CANCEL_AFTER_S", "parse_cancel_after", "parse_prefer_wait"]

MIN_CANCEL_AFTER_S = 5.0
_DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_prefer_wait(header: str | None, max_s: float) -> float | None:
    """Seconds to hold a create open for ``Prefer: wait[=N]`` (§3.2), or None.

    ``wait`` means the maximum (60 s); ``wait=N`` is clamped to [1, max_s]. Other
    preferences are ignored, and malformed ``wait`` values (``wait=abc``, ``wait=nan``)
    mean the maximum (the spec asks for leniency).
    """
    if not header:
        return None
    for preference in header.split(","):
        name, _, value = preference.strip().partition("=")
        if name.strip().lower() != "wait":
            continue
        if not value:
            return max_s
        try:
            seconds = float(value.strip().strip('"'))
        except ValueError:
            return max_s
        if math.isnan(seconds):
            return max_s
        return min(max(seconds, 1.0), max_s)
    return None


def parse_cancel_after(header: str | None, max_s: float | None = None) -> float | None:
    """Seconds from ``Cancel-After``: ``30``, ``30s``, ``5m``, ``1h30m45s`` (§3.2).

    ``max_s`` (the gateway's maximum job lifetime) caps the result: no job outlives it,
    whatever the app asks for.

    Raises
    ------
    ContractViolation
        For any other syntax, a value that is not finite, or a value under 5 s.
    """
    if header is None:
        return None
    text = header.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION_RE.match(text)
        if not text or match is None:
            raise ContractViolation(
                f"Cancel-After {header!r} is not a duration like 30, 30s, 5m or 1h30m45s"
            ) from None
        hours, minutes, secs = match.groups()
        # float, not int: huge values become inf (refused below) rather than overflow
        seconds = float(hours or 0) * 3600 + float(minutes or 0) * 60 + float(secs or 0)
    if not math.isfinite(seconds):
        raise ContractViolation(f"Cancel-After {header!r} is not a finite duration")
    if seconds < MIN_CANCEL_AFTER_S:
        raise ContractViolation(f"Cancel-After must be at least {MIN_CANCEL_AFTER_S:.0f} s")
    return seconds if max_s is None else min(seconds, max_s)
