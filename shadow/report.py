"""The shadow-diff report of one route (docs/shadow.md, "The report").

:func:`build` aggregates judged pairs into a :class:`Report` (a frozen, JSON-serialisable
model); :func:`render` turns it into Markdown, JSON or a self-contained HTML page. Both are
pure: the caller fetches the pairs (and, for images shown inline, awaits
:func:`with_previews`, which reads the worst pairs' images) and writes the result where
it wants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Literal

from contracts.job import JobState
from shadow import compare, html_report, md_report, noise, verdict
from shadow.compare import MEASURES, PairComparison
from shadow.model import (
    CostSummary,
    Coverage,
    Latency,
    MeasureSummary,
    Mismatch,
    Replay,
    Report,
    Verdict,
)
from shadow.outcome import OutputFile, Reader, read_path
from shadow.thresholds import Thresholds

__all__ = [
    "FORMATS",
    "CostSummary",
    "Coverage",
    "Latency",
    "MeasureSummary",
    "Mismatch",
    "Replay",
    "Report",
    "build",
    "render",
    "with_previews",
]

FORMATS = ("md", "json", "html")
Format = Literal["md", "json", "html"]
PLOT_POINTS = 400
"""Latency values kept per arm for plots (evenly spaced order statistics)."""

ImageSource = Callable[[OutputFile, str | None], str | None]
"""``(file, preview data URI or None) -> src for <img>``, or None to show no image."""


def build(
    route: str,
    pairs: Iterable[PairComparison],
    baseline: Iterable[PairComparison] | noise.Baseline,
    thresholds: Thresholds | None = None,
    *,
    since: datetime | None = None,
    now: datetime | None = None,
    worst: int = 10,
    has_candidate: bool = True,
    coverage: Coverage | None = None,
    replay: Replay | None = None,
) -> Report:
    """Aggregate control-vs-candidate pairs against control-vs-control ones.

    Parameters
    ----------
    route : str
        The route's name as operators write it (``model`` or ``model:version``).
    pairs : iterable of PairComparison
        Control-vs-candidate comparisons; pairs whose control was canceled are left out
        (and counted in the notes): the app stopped them, they say nothing.
    baseline : iterable of PairComparison or Baseline
        Control-vs-control comparisons (or a Baseline built from them).
    thresholds : Thresholds or None
        The route's thresholds; defaults when None.
    since, now : datetime or None
        The window shown in the report (``now`` defaults to the current UTC time).
    worst : int
        How many reported pairs to keep, contract breaks first, then by severity.
    has_candidate : bool
        False when the route has no candidate provider: the verdict is ``no-candidate``.
    coverage : Coverage or None
        Shadows made and skipped in the window (the store's count), shown as is.
    replay : Replay or None
        The replay the pairs came from; the report's title and window say so.
    """
    thresholds = thresholds or Thresholds()
    given = list(pairs)
    found = [pair for pair in given if pair.control.status != JobState.CANCELED]
    base = baseline if isinstance(baseline, noise.Baseline) else noise.Baseline.from_pairs(baseline)
    limits = base.limits(thresholds)
    judged = [noise.judge(pair, base, thresholds, limits) for pair in found]
    confidence = thresholds.confidence
    ranked = sorted(
        (Mismatch(judgement=j, pair=p) for j, p in zip(judged, found, strict=True) if j.differs),
        key=lambda mismatch: mismatch.judgement.rank,
        reverse=True,
    )
    report = Report(
        route=route,
        has_candidate=has_candidate,
        generated_at=now or datetime.now(UTC),
        since=since,
        thresholds=thresholds,
        pairs=len(found),
        baseline_pairs=base.pairs,
        baseline_breaks=base.breaks,
        status_agreement=noise.rate(
            sum(p.control.status == p.candidate.status for p in found), len(found), confidence
        ),
        contract_breaks=noise.rate(sum(p.is_contract_break for p in found), len(found),
                                   confidence),
        differences=noise.rate(sum(j.differs for j in judged), len(found), confidence),
        break_kinds=dict(Counter(b.kind for p in found for b in p.breaks).most_common()),
        measures=_measures(found, judged, base, limits, confidence),
        latency=_latency(found, confidence),
        cost=_cost(found),
        worst=tuple(ranked[:worst]),
        verdict=Verdict(decision="hold", line=""),
        notes=_notes(base, thresholds, canceled=len(given) - len(found)),
        coverage=coverage,
        replay=replay,
    )
    return report.model_copy(update={"verdict": verdict.decide(report)})


async def with_previews(report: Report, read: Reader = read_path) -> Report:
    """The report with image thumbnails on its worst mismatches (for a page that works
    offline); ``read`` gets a file's bytes, as in :func:`shadow.compare.compare`."""
    worst = []
    for mismatch in report.worst:
        pair = await compare.add_previews(mismatch.pair, read)
        worst.append(mismatch.model_copy(update={"pair": pair}))
    return report.model_copy(update={"worst": tuple(worst)})


def render(report: Report, fmt: Format, *, image_src: ImageSource | None = None) -> str:
    """The report as ``md`` (Markdown), ``json`` or ``html`` (one offline page).

    ``image_src`` maps an image file to an ``<img src>`` (HTML only); by default the
    file's preview ``data:`` URI, else its URL when it is http(s), else no image.

    Raises
    ------
    ValueError
        An unknown format.
    """
    if fmt == "json":
        return report.model_dump_json(indent=2, context={"public": True})  # no server paths
    if fmt == "md":
        return md_report.render_md(report)
    if fmt == "html":
        return html_report.render_html(report, image_src=image_src)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def _measures(
    pairs: Sequence[PairComparison], judged: Sequence[noise.Judgement], base: noise.Baseline,
    limits: dict[str, noise.MeasureLimit], confidence: float,
) -> tuple[MeasureSummary, ...]:
    summaries = []
    for name, unit in MEASURES.items():
        values = [p.measures[name] for p in pairs if name in p.measures]
        if not values and name not in base.values:
            continue
        count = sum(any(f.measure == name for f in j.findings) for j in judged)
        summaries.append(MeasureSummary(
            measure=name, unit=unit, reported=noise.rate(count, len(values), confidence),
            limit=limits.get(name), candidate_p50=_percentile(sorted(values), 0.5),
            baseline_p50=_percentile(base.values.get(name, ()), 0.5),
        ))
    return tuple(summaries)


def _latency(pairs: Sequence[PairComparison], confidence: float
             ) -> dict[str, dict[str, Latency]]:
    found: dict[str, dict[str, Latency]] = {}
    for phase in ("queue", "run"):
        found[phase] = {}
        for arm in ("control", "candidate"):
            values = sorted(
                value for p in pairs
                if (value := getattr(getattr(p, arm), f"{phase}_s")) is not None
            )
            low, high = noise.quantile_interval(values, 0.95, confidence)
            found[phase][arm] = Latency(
                n=len(values), p50_s=_percentile(values, 0.5), p95_s=_percentile(values, 0.95),
                p95_low_s=low, p95_high_s=high,
                max_s=values[-1] if values else None, sample_s=_sample(values),
            )
    return found


def _cost(pairs: Sequence[PairComparison]) -> CostSummary | None:
    both = [(p.control.cost_usd, p.candidate.cost_usd) for p in pairs
            if p.control.cost_usd is not None and p.candidate.cost_usd is not None]
    if not both:
        return None
    control = sum(c for c, _ in both) / len(both)
    candidate = sum(c for _, c in both) / len(both)
    return CostSummary(n=len(both), control_mean_usd=control, candidate_mean_usd=candidate,
                       ratio=candidate / control if control > 0 else None)


def _notes(base: noise.Baseline, thresholds: Thresholds, *, canceled: int
           ) -> tuple[str, ...]:
    notes = []
    if canceled:
        notes.append(f"{canceled} pairs left out: their control prediction was canceled")
    if base.pairs < thresholds.min_baseline_pairs:
        notes.append(
            f"baseline: {base.pairs} control-vs-control pairs, fewer than the "
            f"{thresholds.min_baseline_pairs} needed; every measure is held against its "
            "margin alone, as for a deterministic model"
        )
    if base.breaks:
        notes.append(f"the control broke its own contract in {base.breaks} of {base.pairs} "
                     "control-vs-control pairs (a flaky control)")
    return tuple(notes)


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """The "higher" empirical quantile of sorted values (None when empty)."""
    return noise.quantile(ordered, q)[0] if ordered else None


def _sample(ordered: Sequence[float]) -> tuple[float, ...]:
    if len(ordered) <= PLOT_POINTS:
        return tuple(ordered)
    step = (len(ordered) - 1) / (PLOT_POINTS - 1)
    return tuple(ordered[round(i * step)] for i in range(PLOT_POINTS))
