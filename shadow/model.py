"""What a shadow report is made of: the :class:`Report` of one route and its parts
(latency, measure and cost summaries, mismatches, the :class:`Verdict`), as frozen,
JSON-serialisable models (docs/shadow.md, "The report"). :mod:`shadow.report` builds and
renders them, :mod:`shadow.verdict` decides the verdict.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from shadow import noise
from shadow.compare import PairComparison
from shadow.thresholds import Thresholds

__all__ = [
    "CostSummary", "Coverage", "Decision", "Latency", "MeasureSummary", "Mismatch", "Replay",
    "Report", "Verdict",
]

Decision = Literal["promote", "hold", "block", "no-candidate"]


class Verdict(BaseModel):
    """``decision`` and the one ``line`` to print; ``reasons`` lists every check that failed;
    ``caveats`` what limits the evidence (a baseline too small, a skipped share, low n),
    shown with the line, before the details (docs/shadow.md, "The verdict")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Decision
    line: str
    reasons: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()


class Latency(BaseModel):
    """One arm's durations in seconds: count, median, p95 with its confidence interval
    (:func:`shadow.noise.quantile_interval`; None where too few values bound it), max and
    a sorted sample for plots."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int
    p50_s: float | None
    p95_s: float | None
    p95_low_s: float | None = None
    p95_high_s: float | None = None
    max_s: float | None
    sample_s: tuple[float, ...]


class MeasureSummary(BaseModel):
    """One measure over all candidate pairs: how often it was over its limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    measure: str
    unit: str
    reported: noise.Rate
    limit: noise.MeasureLimit | None
    candidate_p50: float | None
    baseline_p50: float | None


class CostSummary(BaseModel):
    """Mean reported cost per prediction in US dollars, over pairs where both report it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int
    control_mean_usd: float
    candidate_mean_usd: float
    ratio: float | None


class Coverage(BaseModel):
    """How many eligible primaries got a shadow that reached its provider, and how many
    got none, by reason (``policy_size``, ``policy_field``, ``budget``, ``queue_full``,
    ``provider_refused``; docs/shadow.md, "Skips"); None in a report built without it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shadowed: int
    skipped: dict[str, int]

    @property
    def line(self) -> str:
        """``n shadowed, m skipped: k reason, ...`` (``m skipped`` alone when none)."""
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        total = sum(self.skipped.values())
        return f"{self.shadowed} shadowed, {total} skipped" + (f": {reasons}" if reasons else "")


class Replay(BaseModel):
    """The replay a report's pairs came from (docs/cutover-day.md, "Replaying recorded
    inputs"): its id and state, the window of recorded inputs (``since`` .. ``until``),
    how many it took (``inputs``), sent and skipped (refused by the shadow policy), and
    the share also sent to the control again (``baseline_percent``). None in a report
    of live traffic."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    state: str
    since: AwareDatetime | None
    until: AwareDatetime
    inputs: int
    sent: int
    skipped: int
    baseline_percent: float

    @property
    def line(self) -> str:
        """``replay ID (state) of recorded inputs from T to U: n inputs, ...``."""
        since = f"{self.since:%Y-%m-%d %H:%M:%S} UTC" if self.since else "the first one"
        return (f"replay {self.id} ({self.state}) of recorded inputs from {since} to "
                f"{self.until:%Y-%m-%d %H:%M:%S} UTC: {self.inputs} inputs, {self.sent} sent, "
                f"{self.skipped} skipped by the shadow policy, {self.baseline_percent:g}% "
                "also to the control for the baseline")


class Mismatch(BaseModel):
    """A reported pair, with everything needed to show both sides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judgement: noise.Judgement
    pair: PairComparison


class Report(BaseModel):
    """A route's shadow report; see docs/shadow.md for every field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    route: str
    has_candidate: bool = True
    generated_at: AwareDatetime
    since: AwareDatetime | None
    thresholds: Thresholds
    pairs: int
    baseline_pairs: int
    baseline_breaks: int
    status_agreement: noise.Rate
    contract_breaks: noise.Rate
    differences: noise.Rate
    break_kinds: dict[str, int]
    measures: tuple[MeasureSummary, ...]
    latency: dict[str, dict[str, Latency]]
    cost: CostSummary | None
    worst: tuple[Mismatch, ...]
    verdict: Verdict
    notes: tuple[str, ...]
    coverage: Coverage | None = None
    replay: Replay | None = None
