"""The report as Markdown, for a terminal, a pull request or a ticket (docs/shadow.md).

Same order as the HTML page: verdict, contract breaks, agreement, latency, cost, worst
mismatches (text as a unified diff, files listed with their URL when they have one;
in the diffed output, a file URL reads ``<file N>``).
"""

from __future__ import annotations

import difflib
import re

from shadow.compare import ArmFacts
from shadow.model import Mismatch, Report
from shadow.noise import Rate

__all__ = ["render_md"]

_DIFF_LINES = 60


def render_md(report: Report) -> str:
    """The whole report as GitHub-flavoured Markdown text."""
    since = report.since.isoformat() if report.since else "the first pair"
    lines = [
        f"# Shadow report{' (replay)' if report.replay else ''}: {report.route}",
        "",
        *([f"This report is a {report.replay.line}.", ""] if report.replay else []),
        f"**{report.verdict.line}**",
        *(["", *(f"- Caveat: {caveat}" for caveat in report.verdict.caveats)]
          if report.verdict.caveats else []),
        "",
        f"Pairs from {since} to {report.generated_at.isoformat()}: {report.pairs} "
        f"control-vs-candidate, {report.baseline_pairs} control-vs-control (baseline).",
        "",
        *([f"Shadows: {report.coverage.line}.", ""] if report.coverage else []),
        "## Contract breaks",
        "",
        f"{_rate(report.contract_breaks)} of pairs "
        f"(max {report.thresholds.max_contract_break_rate:.1%}).",
        "",
    ]
    if report.break_kinds:
        lines += ["| kind | occurrences |", "| --- | ---: |"]
        lines += [f"| {kind} | {count} |" for kind, count in report.break_kinds.items()]
        lines.append("")
    lines += _agreement(report) + _latency(report) + _cost(report) + _worst(report)
    if report.notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in report.notes] + [""]
    return "\n".join(lines)


def _rate(found: Rate) -> str:
    return (f"{found.count}/{found.n} ({found.value:.1%}, {found.confidence:.0%} CI "
            f"{found.low:.1%}-{found.high:.1%})")


def _agreement(report: Report) -> list[str]:
    lines = [
        "## Agreement",
        "",
        f"- status agreement: {_rate(report.status_agreement)}",
        f"- any reported difference: {_rate(report.differences)} "
        f"(max {report.thresholds.max_difference_rate:.1%})",
        "",
        "| measure | unit | reported | limit | baseline quantile | candidate median |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for summary in report.measures:
        limit = summary.limit
        lines.append(
            f"| {summary.measure} | {summary.unit} | {_rate(summary.reported)} | "
            f"{_num(limit.limit if limit else None, 'not judged')} | "
            f"{_num(limit.baseline_value if limit else None)} | {_num(summary.candidate_p50)} |"
        )
    return [*lines, ""]


def _latency(report: Report) -> list[str]:
    lines = ["## Latency", "", "| phase | arm | n | p50 s | p95 s | p95 CI s | max s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for phase, arms in report.latency.items():
        for arm, found in arms.items():
            lines.append(f"| {phase} | {arm} | {found.n} | {_num(found.p50_s)} | "
                         f"{_num(found.p95_s)} | {_num(found.p95_low_s)}-"
                         f"{_num(found.p95_high_s, 'unbounded')} | {_num(found.max_s)} |")
    return [*lines, ""]


def _cost(report: Report) -> list[str]:
    if report.cost is None:
        return ["## Cost", "", "Not reported by both providers.", ""]
    cost = report.cost
    return ["## Cost", "", f"Over {cost.n} pairs: control ${cost.control_mean_usd:.5f}, "
            f"candidate ${cost.candidate_mean_usd:.5f} per prediction "
            f"(ratio {_num(cost.ratio)}).", ""]


def _worst(report: Report) -> list[str]:
    lines = ["## Worst mismatches", ""]
    if not report.worst:
        return [*lines, "None reported.", ""]
    for index, mismatch in enumerate(report.worst, start=1):
        lines += _mismatch(index, mismatch)
    return lines


def _mismatch(index: int, mismatch: Mismatch) -> list[str]:
    judgement, pair = mismatch.judgement, mismatch.pair
    lines = [f"### {index}. pair {pair.pair_id or '(no id)'}", ""]
    lines += [f"- **contract break** {b.kind} at `{b.path}`: {b.control} vs {b.candidate}"
              for b in judgement.breaks]
    lines += [f"- {f.measure} {f.value:.4g} over its limit {f.limit:.4g}"
              for f in judgement.findings]
    lines += [f"- image difference files[{n}]: largest {h.max_levels} levels, mean "
              f"{h.mean_levels:.2f} levels" for n, h in enumerate(pair.heatmaps) if h]
    if pair.input_excerpt:
        shown_input = pair.input_excerpt[:_INPUT_CHARS]
        cut = "" if shown_input == pair.input_excerpt else " (cut; the HTML page shows all)"
        fence = "`" * max(3, 1 + max(map(_backtick_run, shown_input.splitlines() or [""])))
        lines += ["", f"Input{cut}:", "", f"{fence}json", shown_input, fence]
    lines += ["", "| | control | candidate |", "| --- | --- | --- |",
              f"| status | {_cell(pair.control.status.value)} | "
              f"{_cell(pair.candidate.status.value)} |",
              f"| error | {_cell(_error(pair.control))} | {_cell(_error(pair.candidate))} |",
              f"| files | {_cell(_files(pair.control))} | {_cell(_files(pair.candidate))} |",
              f"| run s | {_num(pair.control.run_s)} | {_num(pair.candidate.run_s)} |", ""]
    diff = list(difflib.unified_diff(
        _excerpt(pair.control).splitlines(), _excerpt(pair.candidate).splitlines(),
        "control", "candidate", lineterm="", n=2,
    ))
    if pair.control.text != pair.candidate.text:
        diff += list(difflib.unified_diff(
            pair.control.text.splitlines(), pair.candidate.text.splitlines(),
            "control text", "candidate text", lineterm="", n=2,
        ))
    if diff:
        shown = diff[:_DIFF_LINES]
        fence = "`" * max(3, 1 + max(_backtick_run(line) for line in shown))
        lines += [f"{fence}diff", *shown, fence, ""]
    return lines


_INPUT_CHARS = 1_000
"""Characters of a pair's input shown in Markdown."""


def _excerpt(facts: ArmFacts) -> str:
    """The output excerpt with each file URL as ``<file N>`` (its place in the files table):
    two arms' URLs always differ, and the files are compared by the measures, not by URL."""
    excerpt = facts.output_excerpt
    for index, file in enumerate(facts.files, start=1):
        if file.url:
            excerpt = excerpt.replace(file.url, f"<file {index}>")
    return excerpt


def _backtick_run(line: str) -> int:
    """The longest run of backticks in a line (a fence must be longer to hold it)."""
    return max((len(run) for run in re.findall(r"`+", line)), default=0)


def _error(facts: ArmFacts) -> str:
    return f"{facts.error_class}: {facts.error[:200]}" if facts.error else ""


def _files(facts: ArmFacts) -> str:
    return "; ".join(
        f"{file.media_type} {file.size_bytes} B {file.url or file.sha256[:12]}"
        for file in facts.files
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.4g}"
