"""What the console's pages show, computed from :meth:`gateway.rollout.control.RouteControl.
describe` (the admin API's and ``cutover routes show``'s figures): no I/O here.

:func:`guard_view` says what the guard would do with the numbers on the page: ``off``
(no guard), ``paused``, ``idle`` (nothing to judge: no candidate or canary 0),
``collecting`` (fewer samples than ``min_samples``), ``ok`` or ``breach`` (with the
guard's own reason, :func:`gateway.rollout.guard.evaluate`), and each threshold beside its figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gateway.rollout import guard
from gateway.rollout.spec import GuardSettings

__all__ = ["NONE", "Check", "GuardView", "arm_stats", "change_summary", "guard_view", "ms", "pct"]


@dataclass(frozen=True)
class Check:
    """One threshold: what it judges, the figure now, the limit, whether it holds
    (None: not judged yet)."""

    name: str
    value: str
    limit: str
    ok: bool | None


@dataclass(frozen=True)
class GuardView:
    state: str
    label: str
    detail: str
    checks: list[Check] = field(default_factory=list)


_ARM_FIELDS = {f.name for f in fields(guard.ArmStats)}
NONE = "\u2013"  # an en dash: no figure
_TIMES = "\u00d7"


def arm_stats(arm: dict[str, Any] | None) -> guard.ArmStats:
    """An arm of ``describe()`` back as :class:`gateway.rollout.guard.ArmStats` (none: empty)."""
    if arm is None:
        return guard.ArmStats(count=0, failed=0, error_rate=None, p50_s=None, p95_s=None)
    return guard.ArmStats(**{k: v for k, v in arm.items() if k in _ARM_FIELDS})


def pct(value: float | None, digits: int = 1) -> str:
    return NONE if value is None else f"{value * 100:.{digits}f} %"


def ms(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def guard_view(shown: dict[str, Any]) -> GuardView:
    """The guard's state on route ``shown`` (a ``describe()`` answer)."""
    spec = shown["spec"]
    if not spec["guard"]:
        return GuardView("off", "Off", "No guard: nothing rolls this route back by itself.")
    settings = GuardSettings.model_validate(spec["guard"])
    control = arm_stats(shown["arms"].get("control"))
    candidate = arm_stats(shown["arms"].get("candidate"))
    checks = _checks(settings, control, candidate)
    judged = candidate.count + candidate.stuck
    if spec.get("guard_paused"):
        return GuardView("paused", "Paused", "The guard counts but will not roll back until "
                         "it is resumed.", checks)
    if not spec["candidate"] or spec["canary_percent"] <= 0:  # judged nothing: no verdicts
        return GuardView("idle", "Idle", "Nothing to judge: no canary traffic.",
                         [replace(c, ok=None) for c in checks])
    breach = guard.evaluate(settings, control, candidate)
    if breach is not None:
        return GuardView("breach", "Breach", f"Rolling back: {breach.reason}.", checks)
    if judged < settings.min_samples:
        return GuardView("collecting", "Collecting",
                         f"{judged} of the {settings.min_samples} samples it needs.", checks)
    return GuardView("ok", "Within limits", f"Judging {judged} candidate samples.", checks)


def _checks(g: GuardSettings, control: guard.ArmStats, candidate: guard.ArmStats) -> list[Check]:
    judged = candidate.count + candidate.stuck
    enough = judged >= g.min_samples
    checks = [Check("Samples", str(judged), f"≥ {g.min_samples}", enough)]
    if g.max_error_rate is not None:
        rate = candidate.error_rate
        checks.append(Check("Error rate", pct(rate), f"≤ {pct(g.max_error_rate)}",
                            None if not enough or rate is None else rate <= g.max_error_rate))
    if g.max_p95_ratio is not None:
        ratio = None
        if candidate.p95_s is not None and control.p95_s is not None:
            ratio = candidate.p95_s / max(control.p95_s, 1e-6)
        both = enough and control.count >= g.min_samples
        checks.append(Check("p95 vs control", NONE if ratio is None else f"{ratio:.2f}{_TIMES}",
                            f"≤ {g.max_p95_ratio:g}{_TIMES}",
                            None if not both or ratio is None else ratio <= g.max_p95_ratio))
    checks.append(Check("Stuck", str(candidate.stuck), f"after {g.max_queue_s:g} s", None))
    if g.max_contract_break_rate is not None:
        checks.append(Check("Contract breaks", "see report",
                            f"≤ {pct(g.max_contract_break_rate)}", None))
    return checks


def change_summary(change: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(field, before, after)`` of every spec field an audited change moved."""
    before, after = change.get("before"), change["after"]
    if before is None:
        return []
    return [(k, _text(before.get(k)), _text(after.get(k)))
            for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]


def _text(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)
