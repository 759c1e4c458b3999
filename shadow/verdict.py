"""The one-line verdict of a report against the route's promotion thresholds.

Three outcomes (docs/shadow.md, "The verdict"):

- ``block``: the evidence says a threshold is breached: a Wilson *lower* bound above its
  maximum rate, or (with at least ``min_pairs`` pairs) the p95 run-time or cost ratio
  above its maximum;
- ``promote``: at least ``min_pairs`` pairs, and every Wilson *upper* bound and ratio
  within its maximum;
- ``hold``: anything in between; the line says what is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from shadow.noise import Rate

if TYPE_CHECKING:
    from shadow.report import Report

__all__ = ["Verdict", "decide"]

Decision = Literal["promote", "hold", "block"]


class Verdict(BaseModel):
    """``decision`` and the one ``line`` to print; ``reasons`` lists every check that failed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Decision
    line: str
    reasons: tuple[str, ...] = ()


def decide(report: Report) -> Verdict:
    """The verdict of a built report (pure; reads only the report)."""
    blocks, holds = _rate_checks(report)
    ratio_blocks, ratio_holds = _ratio_checks(report)
    blocks += ratio_blocks
    holds += ratio_holds
    if report.pairs < report.thresholds.min_pairs:
        holds.insert(0, f"{report.pairs} of the {report.thresholds.min_pairs} pairs needed")
    if blocks:
        decision: Decision = "block"
        reasons = blocks
    elif holds:
        decision, reasons = "hold", holds
    else:
        decision, reasons = "promote", []
    summary = (
        f"{report.route}: {report.pairs} pairs, "
        f"contract breaks {_share(report.contract_breaks)}, "
        f"differences {_share(report.differences)}"
    )
    tail = "; ".join(reasons) if reasons else "every threshold met"
    return Verdict(decision=decision, line=f"{decision.upper()} {summary} - {tail}",
                   reasons=tuple(reasons))


def _rate_checks(report: Report) -> tuple[list[str], list[str]]:
    blocks: list[str] = []
    holds: list[str] = []
    limits = (
        ("contract-break rate", report.contract_breaks,
         report.thresholds.max_contract_break_rate),
        ("difference rate", report.differences, report.thresholds.max_difference_rate),
    )
    for name, found, maximum in limits:
        if found.n and found.low > maximum:
            blocks.append(f"{name} at least {found.low:.1%} > {maximum:.1%}")
        elif found.high > maximum:
            holds.append(f"{name} could be up to {found.high:.1%} (max {maximum:.1%})")
    return blocks, holds


def _ratio_checks(report: Report) -> tuple[list[str], list[str]]:
    blocks: list[str] = []
    holds: list[str] = []
    enough = report.pairs >= report.thresholds.min_pairs
    run = report.latency.get("run", {})
    control, candidate = run.get("control"), run.get("candidate")
    maximum = report.thresholds.max_p95_latency_ratio
    if maximum is not None and control and candidate and control.p95_s and candidate.p95_s:
        ratio = candidate.p95_s / control.p95_s
        if ratio > maximum:
            message = f"p95 run time {ratio:.2f}x control > {maximum:.2f}x"
            (blocks if enough else holds).append(message)
    cost_max = report.thresholds.max_cost_ratio
    if cost_max is not None and report.cost and report.cost.ratio is not None:
        if report.cost.ratio > cost_max:
            message = f"mean cost {report.cost.ratio:.2f}x control > {cost_max:.2f}x"
            (blocks if enough else holds).append(message)
    return blocks, holds


def _share(found: Rate) -> str:
    return f"{found.count}/{found.n} ({found.value:.1%}, <= {found.high:.1%})"
