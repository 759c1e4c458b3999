"""The sticky canary draw: which arm a caller's prediction goes to (docs/canary.md).

The caller key (an API token, a header or an input field; :class:`gateway.rollout.spec.CallerKey`)
is hashed with the route's name into one of 10,000 buckets. The candidate takes buckets
``[0, percent * 100)``: the same caller always lands in the same bucket, so it keeps its
arm at a given percent, and raising the percent only adds buckets, so callers move from
control to candidate and never back. Shadow sampling draws on the prediction id instead
(a fresh draw per prediction).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from gateway.rollout.spec import CallerKey, RouteSpec

__all__ = [
    "BUCKETS",
    "Arm",
    "bucket",
    "caller_identity",
    "choose_arm",
    "sampled",
    "shadow_arm",
    "shadow_draw",
]

Arm = Literal["control", "candidate"]
BUCKETS = 10_000


def bucket(route: str, caller: str) -> int:
    """The caller's bucket on ``route``, in ``[0, BUCKETS)``: stable across processes."""
    digest = hashlib.sha256(f"{route}\x00{caller}".encode(errors="surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def _threshold(percent: float) -> int:
    return round(max(0.0, min(percent, 100.0)) * BUCKETS / 100)


def choose_arm(route: str, caller: str, percent: float) -> Arm:
    """``candidate`` when the caller's bucket is under ``percent`` (0-100), else ``control``."""
    if percent <= 0:
        return "control"
    return "candidate" if bucket(route, caller) < _threshold(percent) else "control"


def sampled(route: str, prediction_id: str, percent: float) -> bool:
    """Whether a prediction is drawn for a shadow at ``percent`` (0-100)."""
    if percent <= 0:
        return False
    return bucket(f"shadow:{route}", prediction_id) < _threshold(percent)


def caller_identity(
    key: CallerKey, *, token: str, headers: Mapping[str, str], data: Mapping[str, Any]
) -> str:
    """The text that identifies the caller under ``key``.

    ``token`` is the presented API token (only hashed, never kept). A missing header or
    input field falls back to the token, so such callers are still sticky.
    """
    if key.source == "header" and key.name is not None:
        value = headers.get(key.name)
        if value:
            return f"header:{value}"
    if key.source == "input" and key.name is not None and key.name in data:
        value = data[key.name]
        if value is not None and value != "":
            return f"input:{value!r}" if not isinstance(value, str) else f"input:{value}"
    return "token:" + hashlib.sha256(token.encode(errors="surrogateescape")).hexdigest()


def shadow_arm(
    route: str, spec: RouteSpec, arm: str, prediction_id: str, data: dict[str, Any]
) -> str | None:
    """Which hidden copy a new prediction gets, if any (docs/shadow.md).

    Only a control-arm prediction, drawn at the route's shadow percent, whose input the
    route's policy admits (none: nothing is shadowed, docs/architecture.md, invariant 7):
    ``baseline`` (the control a second time) for ``baseline_percent`` of those, else ``shadow`` (the
    candidate); None otherwise.
    """
    drawn, refusal = shadow_draw(route, spec, arm, prediction_id, data)
    return None if refusal else drawn


def shadow_draw(
    route: str, spec: RouteSpec, arm: str, prediction_id: str, data: dict[str, Any]
) -> tuple[str | None, str | None]:
    """``(hidden arm, policy refusal)`` of a new prediction: ``(None, None)`` when it is
    not eligible (not the control, no candidate or policy, not drawn at the shadow
    percent); ``(arm, reason)`` when it is drawn but the policy refuses its input
    (:meth:`shadow.policy.ShadowPolicy.refusal`'s reason); ``(arm, None)`` when it is
    shadowed."""
    if arm != "control" or spec.candidate is None or spec.shadow_policy is None:
        return None, None
    if not sampled(route, prediction_id, spec.shadow_percent):
        return None, None
    drawn = "baseline" if sampled(f"baseline:{route}", prediction_id,
                                  spec.baseline_percent) else "shadow"
    return drawn, spec.shadow_policy.refusal(data)
