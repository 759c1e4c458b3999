"""Maps: a route's jq programs that reshape inputs and outputs per provider.

``[routes.maps.PROVIDER]`` gives an ``input`` program (the app's validated input -> the
input that provider's adapter takes) and an ``output`` program (the provider's output ->
the output the app sees, run on the final output and on interim ones within the
finalizer's budget, :class:`gateway.finalizer.InterimBudget`, before files are copied
to owned storage). Programs are written in the jq language and run by the ``jq`` package
(docs/translation.md). Each is compiled once, when a route is loaded (config, store,
admin API), and kept by its text; a prediction only runs it.

Two jq pitfalls are designed around here (docs/translation.md, "Two jq pitfalls"):

* jq keeps numbers as doubles: an integer beyond 2^53 (a seed of 18446744073709551615)
  would come out rounded. Such integers go into jq as a marked string
  (:data:`BIG_INT_MARK` then the digits) and come back as the same integer, exactly; a
  program that does arithmetic on one fails with jq's type error rather than round it.
* ``a // b`` takes ``b`` when ``a`` is ``false``, not only when it is missing, so
  ``.flag // true`` turns an app's ``false`` into ``true``. Presets test for a missing key
  with ``if has("flag") then .flag else true end``; :func:`falls_back_on_false` finds the
  pattern in a program, for tests.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

import jq
from pydantic import BaseModel, ConfigDict, Field

from contracts.errors import ContractViolation

__all__ = [
    "BIG_INT_MARK",
    "MapError",
    "MapSpec",
    "compile_problem",
    "compiled",
    "falls_back_on_false",
    "map_problems",
    "run",
]

#: Marks an integer jq cannot hold exactly (beyond 2^53) while it is inside jq: a
#: private-use character no app sends, then the integer's decimal digits.
BIG_INT_MARK = "\ue000"
_SAFE = 2**53
_MARKED = re.compile(f"{BIG_INT_MARK}(-?[0-9]+)")
#: Every digit as ``0``: a JSON text whose digits so read hold no run of 16 (2^53 has 16
#: digits) holds no integer beyond 2^53, and goes to jq as it is (no walk).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS = b"0" * 16
_MAX_PROGRAM_CHARS = 20_000
_MISSING = object()


class MapError(ContractViolation):
    """A map failed on one value (jq's run-time error, or not exactly one result); the
    message is one line."""


class MapSpec(BaseModel):
    """``[routes.maps.PROVIDER]``: jq programs for one provider of a route; either may be
    absent (that direction is passed as it is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: str | None = Field(default=None, max_length=_MAX_PROGRAM_CHARS)
    output: str | None = Field(default=None, max_length=_MAX_PROGRAM_CHARS)


def map_problems(maps: Mapping[str, MapSpec]) -> list[str]:
    """Every program of ``maps`` (provider -> spec) that does not compile, as
    ``maps.PROVIDER.SIDE does not compile: <jq's message>`` (compiling the rest)."""
    problems = []
    for provider, spec in maps.items():
        for side in ("input", "output"):
            problem = compile_problem(getattr(spec, side))
            if problem is not None:
                problems.append(f"maps.{provider}.{side} does not compile: {problem}")
    return problems


@functools.lru_cache(maxsize=1024)
def compiled(program: str) -> Any:
    """The compiled jq program for ``program`` (compiled once per text and process).

    Raises
    ------
    ValueError
        jq's compile error.
    """
    return jq.compile(program)


def compile_problem(program: str | None) -> str | None:
    """jq's message, on one line, when ``program`` does not compile; None when it does."""
    if program is None:
        return None
    try:
        compiled(program)
    except ValueError as exc:
        return _one_line(str(exc))
    return None


def run(program: str, value: Any, *, what: str) -> Any:
    """``program``'s one result for ``value`` (any JSON value), integers beyond 2^53 kept
    exactly: ``value`` goes to jq as JSON text, and only a text with a run of 16 or more
    digits is walked for such integers (and its result for marked ones).

    ``what`` names the map in the error (``"the input map of provider 'fal'"``).

    Raises
    ------
    MapError
        jq's run-time error, or the program gave no result or more than one.
    """
    protected = value
    try:
        text = json.dumps(value)
        if _SIXTEEN_DIGITS in text.encode().translate(_DIGITS_AS_ZERO):
            # it may hold an integer beyond 2^53 (or only a long number or digits in a
            # string): walk it, and send the marked copy when it does
            protected = _protect(value)
            if protected is not value:
                text = json.dumps(protected)
        results = iter(compiled(program).input_text(text))
        first = next(results, _MISSING)
        extra = next(results, _MISSING) if first is not _MISSING else _MISSING
    except ValueError as exc:
        raise MapError(f"{what} failed: {_one_line(str(exc))}") from None
    if first is _MISSING:
        raise MapError(f"{what} gave no value (a map must give exactly one)")
    if extra is not _MISSING:
        raise MapError(f"{what} gave more than one value (a map must give exactly one; "
                       "wrap a stream in [...])")
    return first if protected is value else _restore(first)


def falls_back_on_false(program: str, boolean_keys: set[str]) -> list[str]:
    """The keys of ``boolean_keys`` that ``program`` reads as ``.key // ...``: an app's
    ``false`` there would be replaced by the fallback (the second pitfall)."""
    return sorted(k for k in boolean_keys if re.search(rf"\.{re.escape(k)}\s*//", program))


def _protect(value: Any) -> Any:
    """``value`` with each integer beyond 2^53 as a marked string (the same objects when
    there is none, so a common input is not copied)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{BIG_INT_MARK}{value}" if not -_SAFE <= value <= _SAFE else value
    if isinstance(value, dict):
        items = {k: _protect(v) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list):
        values = [_protect(v) for v in value]
        return value if all(a is b for a, b in zip(values, value, strict=True)) else values
    return value


def _restore(value: Any) -> Any:
    """The integers :func:`_protect` marked, back as integers."""
    if isinstance(value, str):
        if value.startswith(BIG_INT_MARK) and (found := _MARKED.fullmatch(value)):
            return int(found.group(1))
        return value
    if isinstance(value, dict):
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


def _one_line(message: str) -> str:
    """jq's message on one line: its ``jq: error`` lines (the source excerpt and caret
    under them dropped), or the whole message folded."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("jq: error")]
    return " / ".join(errors or lines)[:500]
