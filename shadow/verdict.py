"""The one-line verdict of a report against the route's promotion thresholds.

Three outcomes, and a fourth when there is nothing to judge (docs/shadow.md, "The
verdict"):

- ``block``: the evidence says a threshold is breached: a Wilson *lower* bound above its
  maximum rate, the p95 run-time ratio above its maximum even from the candidate's lowest
  plausible p95 to the control's highest, or (with at least ``min_pairs`` pairs) the cost
  ratio above its maximum;
- ``promote``: at least ``min_pairs`` pairs, every Wilson *upper* bound within its
  maximum, the p95 ratio within its maximum from the candidate's highest plausible p95 to
  the control's lowest, and the cost ratio within its maximum;
- ``hold``: anything in between; the line says what is missing;
- ``no-candidate``: the route has no candidate provider, so nothing to compare (not a
  ``hold``, which would read as pairs on their way).
"""

from __future__ import annotations

from shadow.model import Decision, Report, Verdict
from shadow.noise import Rate

__all__ = ["Verdict", "caveats", "decide"]

def decide(report: Report) -> Verdict:
    """The verdict of a built report (pure; reads only the report)."""
    if not report.has_candidate:
        kept = f" ({report.pairs} pairs kept from an earlier one)" if report.pairs else ""
        return Verdict(decision="no-candidate", line=(
            f"NO CANDIDATE {report.route}: the route has no candidate provider, so there is "
            f"nothing to compare{kept}; set its candidate, then a shadow percent"
        ))
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
                   reasons=tuple(reasons), caveats=caveats(report))


def caveats(report: Report) -> tuple[str, ...]:
    """What limits the evidence of a report, as sentences (empty when nothing does)."""
    found = []
    thresholds = report.thresholds
    if report.baseline_pairs < thresholds.min_baseline_pairs:
        found.append(
            f"baseline too small: {report.baseline_pairs} control-vs-control pairs, fewer "
            f"than {thresholds.min_baseline_pairs}; each measure is held against its margin "
            "alone, so a nondeterministic model's own noise may be reported")
    if report.pairs < thresholds.min_pairs:
        found.append(f"low n: {report.pairs} pairs, fewer than the {thresholds.min_pairs} "
                     "needed to promote; the intervals are wide")
    coverage = report.coverage
    skipped = sum(coverage.skipped.values()) if coverage else 0
    if coverage and skipped:
        share = skipped / (skipped + coverage.shadowed)
        found.append(f"skipped share: {skipped} of {skipped + coverage.shadowed} eligible "
                     f"primaries ({share:.1%}) got no shadow; the rates cover only the "
                     "shadowed ones")
    return tuple(found)


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
    latency = _latency_check(report)
    if latency:
        (blocks if latency[0] else holds).append(latency[1])
    cost_max = report.thresholds.max_cost_ratio
    enough = report.pairs >= report.thresholds.min_pairs
    if cost_max is not None and report.cost and report.cost.ratio is not None:
        if report.cost.ratio > cost_max:
            message = f"mean cost {report.cost.ratio:.2f}x control > {cost_max:.2f}x"
            (blocks if enough else holds).append(message)
    return blocks, holds


def _latency_check(report: Report) -> tuple[bool, str] | None:
    """``(blocks, message)`` when the p95 run-time ratio is, or may be, over its maximum.

    Blocks when even the candidate's lowest plausible p95 over the control's highest is
    over the maximum; holds when the point ratio is over, or when the intervals cannot
    rule it out (too few values bound a p95).
    """
    maximum = report.thresholds.max_p95_latency_ratio
    run = report.latency.get("run", {})
    control, candidate = run.get("control"), run.get("candidate")
    if maximum is None or not control or not candidate or not control.p95_s:
        return None
    if candidate.p95_s is None:
        return None
    ratio = candidate.p95_s / control.p95_s
    floor_ratio = (candidate.p95_low_s / control.p95_high_s
                   if candidate.p95_low_s is not None and control.p95_high_s else None)
    ceiling_ratio = (candidate.p95_high_s / control.p95_low_s
                     if candidate.p95_high_s is not None and control.p95_low_s else None)
    if floor_ratio is not None and floor_ratio > maximum:
        return True, (f"p95 run time {ratio:.2f}x control (at least {floor_ratio:.2f}x) "
                      f"> {maximum:.2f}x")
    if ratio > maximum:
        return False, f"p95 run time {ratio:.2f}x control > {maximum:.2f}x, not yet certain"
    if ceiling_ratio is None or ceiling_ratio > maximum:
        bound = "unbounded" if ceiling_ratio is None else f"up to {ceiling_ratio:.2f}x"
        return False, f"p95 run time ratio could be {bound} (max {maximum:.2f}x)"
    return None


def _share(found: Rate) -> str:
    return f"{found.count}/{found.n} ({found.value:.1%}, <= {found.high:.1%})"
