"""Which inputs may be shadowed: a route's shadow input policy (docs/shadow.md, "Policy").

Shadowing sends the app's input to a second provider, so it happens only for inputs the
operator marked safe (docs/architecture.md, invariant 7). A :class:`ShadowPolicy` is an allow-list:
an input is admitted only when every field it has is listed, every rule on its fields
holds, and its compact JSON encoding is at most ``max_input_bytes``. A route with no
policy shadows nothing. The model is frozen and JSON-serialisable for the route store;
a malformed policy (unknown key, bad regular expression, a rule on a field that is not
allowed, min above max) is refused with ``pydantic.ValidationError`` naming the problem.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["FILE_REF", "FieldRule", "ShadowPolicy"]

JsonType = Literal["string", "number", "integer", "boolean", "array", "object", "null"]
Scalar = str | int | float | bool | None


class FieldRule(BaseModel):
    """Predicates on one input field; every predicate given must hold.

    Attributes
    ----------
    field : str
        The input field (top-level key of ``input``).
    required : bool
        The field must be present (otherwise a rule on an absent field holds).
    type : str or None
        JSON type: ``string``, ``number`` (int or float), ``integer``, ``boolean``,
        ``array``, ``object`` or ``null``.
    one_of : list or None
        The value must equal one of these scalars.
    pattern : str or None
        A regular expression the whole string must match (``re.fullmatch``).
    min, max : float or None
        Inclusive bounds of a number.
    max_length : int or None
        Longest string (characters) or array (items).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str = Field(min_length=1)
    required: bool = False
    type: JsonType | None = None
    one_of: tuple[Scalar, ...] | None = None
    pattern: str | None = None
    min: float | None = None
    max: float | None = None
    max_length: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> FieldRule:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern of {self.field!r} is not a valid regex: {exc}") from exc
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max} for {self.field!r}")
        return self

    def violation(self, value: Any) -> str | None:
        """Why ``value`` breaks this rule, or None when it holds."""
        if self.type is not None and not _has_type(value, self.type):
            return f"{self.field} is not of type {self.type}"
        if self.one_of is not None and not any(_same(value, allowed) for allowed in self.one_of):
            return f"{self.field} is not one of the allowed values"
        if self.pattern is not None and not (
            isinstance(value, str) and re.fullmatch(self.pattern, value)
        ):
            return f"{self.field} does not match the pattern"
        return self._bounds(value)

    def _bounds(self, value: Any) -> str | None:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (self.min is not None or self.max is not None) and not (
            number and math.isfinite(value)
        ):
            return f"{self.field} is not a finite number"
        if self.min is not None and value < self.min:
            return f"{self.field} is below {self.min:g}"
        if self.max is not None and value > self.max:
            return f"{self.field} is above {self.max:g}"
        if self.max_length is not None and isinstance(value, str | list) and (
            len(value) > self.max_length
        ):
            return f"{self.field} is longer than {self.max_length}"
        return None


class ShadowPolicy(BaseModel):
    """A route's allow-list of inputs that may be shadowed.

    Attributes
    ----------
    allow_fields : tuple of str
        The only input fields an admitted input may have (an empty list admits ``{}``
        only).
    rules : tuple of FieldRule
        Predicates on allowed fields.
    max_input_bytes : int
        Largest compact UTF-8 JSON encoding of the input, in bytes (default 64 KiB),
        with every ``data:`` URI counted as the reference a shadow gets (:data:`FILE_REF`):
        files go to the shadow by reference, so a large image is not a reason to skip.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_fields: tuple[str, ...]
    rules: tuple[FieldRule, ...] = ()
    max_input_bytes: int = Field(default=65_536, ge=2)

    @model_validator(mode="after")
    def _rules_on_allowed_fields(self) -> ShadowPolicy:
        stray = sorted({rule.field for rule in self.rules} - set(self.allow_fields))
        if stray:
            raise ValueError(f"rules on fields that are not allowed: {', '.join(stray)}")
        return self

    def refusal(self, input_: Mapping[str, Any]) -> str | None:
        """Why this input may not be shadowed, or None when it may.

        The reason names fields, never values (inputs may be private).
        """
        extra = sorted(set(input_) - set(self.allow_fields))
        if extra:
            return f"fields not allowed for shadowing: {', '.join(map(str, extra))}"
        for rule in self.rules:
            if rule.field not in input_:
                if rule.required:
                    return f"{rule.field} is required"
                continue
            reason = rule.violation(input_[rule.field])
            if reason:
                return reason
        size = _encoded_size(_by_reference(input_))
        if size is None:
            return "input is not plain JSON"
        if size > self.max_input_bytes:
            return f"input is larger than {self.max_input_bytes} bytes"
        return None

    def admits(self, input_: Mapping[str, Any]) -> bool:
        """Whether this input may be shadowed."""
        return self.refusal(input_) is None


def _has_type(value: Any, expected: JsonType) -> bool:
    if expected == "null":
        return value is None
    if expected == "boolean":
        return isinstance(value, bool)
    if expected in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return expected == "number" or isinstance(value, int) or float(value).is_integer()
    kinds = {"string": str, "array": list, "object": dict}
    return isinstance(value, kinds[expected])


def _same(value: Any, allowed: Scalar) -> bool:
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return value == allowed
    return type(value) is type(allowed) and value == allowed


#: What a ``data:`` URI counts as in the size limit: a shadow row refers to the primary's
#: input, and a provider that takes no large inline body gets an owned URL of this order.
FILE_REF = "https://gateway.invalid/assets/" + "0" * 26 + "/inputs/0123456789abcdef/input.png"


def _by_reference(value: Any) -> Any:
    if isinstance(value, str):
        return FILE_REF if value.startswith("data:") else value
    if isinstance(value, Mapping):
        return {key: _by_reference(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_by_reference(item) for item in value]
    return value


def _encoded_size(input_: Mapping[str, Any]) -> int | None:
    try:
        text = json.dumps(input_, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return len(text.encode("utf-8"))
