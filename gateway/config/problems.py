"""How a settings validation error is told to an operator: the setting's dotted path and
a one-line message (``cutover check`` and ``serve`` print them; docs/architecture.md)."""

from __future__ import annotations

from typing import Any

from gateway.config.sections import AdminToken

__all__ = ["key", "message"]

_UNION_MODELS = frozenset({AdminToken.__name__})  # tags pydantic puts in an error's loc


def key(error: Any) -> str:
    """The setting's dotted path of one pydantic error, without pydantic's tags of union
    members (``admin.tokens.0``, not ``admin.tokens.0.lax-or-strict[...]...AdminToken``)."""
    parts = [str(part) for part in error["loc"]
             if not (isinstance(part, str) and ("[" in part or part in _UNION_MODELS))]
    return ".".join(parts) or "(top level)"


def message(error: Any) -> str:
    """The error's message, in the operator's terms."""
    if error["type"] == "extra_forbidden":
        return "is not a known setting"
    return str(error["msg"]).removeprefix("Value error, ")
