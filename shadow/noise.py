"""The noise model: judge a candidate pair against control-vs-control (docs/shadow.md).

A nondeterministic model differs from itself. Running the control twice on a sample of
inputs gives, for each measure, the spread of "the same model, twice": the *baseline*.
A candidate pair's measure counts as a difference only when it exceeds

    limit = baseline quantile (Thresholds.baseline_quantile) + margin (per measure)

With ``n`` baseline values and the "higher" empirical quantile at rank ``k``, a fresh
control pair exceeds the quantile alone with probability at most ``(n - k + 1) / (n + 1)``
(exchangeability); the margin is what pushes the false-difference rate below that.
Contract breaks are never excused by the baseline. Rates carry Wilson score intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict

from contracts.job import JobState
from shadow.compare import MEASURES, ContractBreak, PairComparison
from shadow.thresholds import Thresholds

__all__ = [
    "Baseline",
    "Finding",
    "Judgement",
    "MeasureLimit",
    "Rate",
    "contract_breach",
    "judge",
    "quantile",
    "quantile_interval",
    "rate",
    "wilson",
]

SCALE = {"image_phash": 64.0, "image_color": 255.0, "list_length": 10.0}
"""Full range of measures that are not 0-1, used to rank differences across measures."""


class Rate(BaseModel):
    """``count`` of ``n``, with the Wilson score interval ``[low, high]`` (shares, 0-1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int
    n: int
    value: float
    low: float
    high: float
    confidence: float


def wilson(count: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a binomial share ``count / n``.

    Returns ``(0.0, 1.0)`` for ``n == 0`` (nothing is known).

    Raises
    ------
    ValueError
        ``count`` outside ``0..n`` or ``confidence`` outside (0, 1).
    """
    if not 0 <= count <= n or not 0 < confidence < 1:
        raise ValueError(f"bad interval request: {count} of {n} at {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    share = count / n
    centre = share + z * z / (2 * n)
    spread = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    denominator = 1 + z * z / n
    low = (centre - spread) / denominator
    high = (centre + spread) / denominator
    return max(0.0, low), min(1.0, high)


def rate(count: int, n: int, confidence: float = 0.95) -> Rate:
    """A :class:`Rate` of ``count`` of ``n`` (``value`` 0 when ``n`` is 0)."""
    low, high = wilson(count, n, confidence)
    return Rate(count=count, n=n, value=count / n if n else 0.0, low=low, high=high,
                confidence=confidence)


def quantile(values: Sequence[float], q: float) -> tuple[float, int]:
    """The "higher" empirical ``q``-quantile and its 1-based rank ``k = ceil(q * n)``.

    Raises
    ------
    ValueError
        ``values`` is empty.
    """
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered) - 1e-9)))
    return ordered[rank - 1], rank


def quantile_interval(
    ordered: Sequence[float], q: float, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """A distribution-free confidence interval of the ``q``-quantile of sorted values.

    With ``B ~ Binomial(n, q)`` the count of values below the true quantile, the interval
    is the order statistics at ranks ``l`` (the largest with ``P(B <= l - 1) <= a/2``) and
    ``u`` (the smallest with ``P(B <= u - 1) >= 1 - a/2``), ``a = 1 - confidence``; exact,
    no normal approximation. A bound whose rank falls outside ``1..n`` is None: too few
    values to bound the quantile on that side (e.g. a p95 from fewer than 72 values at
    95 %).
    """
    n = len(ordered)
    if n == 0:
        return None, None
    tail = (1 - confidence) / 2
    cdf = _binomial_cdf(n, q)
    low_rank = max((rank for rank in range(1, n + 1) if cdf[rank - 1] <= tail), default=0)
    high_rank = next((rank for rank in range(1, n + 1) if cdf[rank - 1] >= 1 - tail), n + 1)
    low = ordered[low_rank - 1] if low_rank >= 1 else None
    high = ordered[high_rank - 1] if high_rank <= n else None
    return low, high


def _binomial_cdf(n: int, q: float) -> list[float]:
    """``P(B <= k)`` for ``k = 0..n``, ``B ~ Binomial(n, q)``, 0 < q < 1 (log-space pmf)."""
    log_q, log_p = math.log(q), math.log1p(-q)
    head = math.lgamma(n + 1)
    total, found = 0.0, []
    for k in range(n + 1):
        log_pmf = head - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_p
        total += math.exp(log_pmf)
        found.append(min(1.0, total))
    return found


class MeasureLimit(BaseModel):
    """Where one measure starts to count as a difference.

    ``baseline_value`` is the baseline quantile (None without a usable baseline),
    ``limit = (baseline_value or 0) + margin``; ``exceed_bound`` is the chance a fresh
    control pair exceeds the quantile alone, ``(n - k + 1) / (n + 1)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    measure: str
    baseline_pairs: int
    baseline_value: float | None
    margin: float
    limit: float
    exceed_bound: float | None


class Baseline(BaseModel):
    """The control-vs-control spread: per measure, every value seen (sorted).

    Build it with :meth:`from_pairs`; ``pairs`` counts the pairs, ``breaks`` those of
    them with a contract break (a flaky control shows here).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pairs: int = 0
    breaks: int = 0
    values: dict[str, tuple[float, ...]] = {}

    @classmethod
    def from_pairs(cls, pairs: Iterable[PairComparison]) -> Baseline:
        """Collect the measures of control-vs-control comparisons (pairs whose first run
        was canceled are left out)."""
        values: dict[str, list[float]] = {}
        count = breaks = 0
        for pair in pairs:
            if pair.control.status == JobState.CANCELED:
                continue
            count += 1
            breaks += pair.is_contract_break
            for name, value in pair.measures.items():
                values.setdefault(name, []).append(value)
        return cls(pairs=count, breaks=breaks,
                   values={name: tuple(sorted(found)) for name, found in values.items()})

    def limit(self, measure: str, thresholds: Thresholds) -> MeasureLimit | None:
        """The limit of one measure, or None when the measure is not judged."""
        margin = thresholds.margin(measure)
        if margin is None:
            return None
        found = self.values.get(measure, ())
        if self.pairs < thresholds.min_baseline_pairs or not found:
            return MeasureLimit(measure=measure, baseline_pairs=len(found), baseline_value=None,
                                margin=margin, limit=margin, exceed_bound=None)
        value, rank = quantile(found, thresholds.baseline_quantile)
        bound = (len(found) - rank + 1) / (len(found) + 1)
        return MeasureLimit(measure=measure, baseline_pairs=len(found), baseline_value=value,
                            margin=margin, limit=value + margin, exceed_bound=bound)

    def limits(self, thresholds: Thresholds) -> dict[str, MeasureLimit]:
        """The limits of every judged measure, by name."""
        found = {name: self.limit(name, thresholds) for name in MEASURES}
        return {name: limit for name, limit in found.items() if limit is not None}


class Finding(BaseModel):
    """One measure over its limit; ``severity = (value - limit) / scale`` ranks them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    measure: str
    value: float
    limit: float
    severity: float


class Judgement(BaseModel):
    """What one candidate pair amounts to: its contract breaks and drift findings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair_id: str | None
    breaks: tuple[ContractBreak, ...]
    findings: tuple[Finding, ...]

    @property
    def differs(self) -> bool:
        """Whether the pair is reported: a contract break or a finding."""
        return bool(self.breaks or self.findings)

    @property
    def rank(self) -> tuple[int, float]:
        """Sort key, largest first: contract breaks, then summed finding severity."""
        return len(self.breaks), sum(finding.severity for finding in self.findings)


def judge(
    pair: PairComparison, baseline: Baseline, thresholds: Thresholds,
    limits: dict[str, MeasureLimit] | None = None,
) -> Judgement:
    """Judge a control-vs-candidate pair against the baseline.

    ``limits`` may be passed precomputed (``baseline.limits(thresholds)``) when judging
    many pairs. A measure is a finding when ``value > limit``; NaN never is.
    """
    limits = baseline.limits(thresholds) if limits is None else limits
    findings = []
    for name, value in sorted(pair.measures.items()):
        limit = limits.get(name)
        if limit is not None and value > limit.limit:
            severity = (value - limit.limit) / SCALE.get(name, 1.0)
            findings.append(Finding(measure=name, value=value, limit=limit.limit,
                                    severity=severity))
    return Judgement(pair_id=pair.pair_id, breaks=pair.breaks, findings=tuple(findings))


def contract_breach(pairs: Iterable[PairComparison], thresholds: Thresholds) -> str | None:
    """For the canary guard: a reason when the contract-break rate is clearly too high.

    A breach is the Wilson *lower* bound of the contract-break share above
    ``thresholds.max_contract_break_rate`` (so a handful of pairs with one break is not
    one); None when there is no breach.
    """
    seen = list(pairs)
    found = rate(sum(pair.is_contract_break for pair in seen), len(seen), thresholds.confidence)
    if found.n == 0 or found.low <= thresholds.max_contract_break_rate:
        return None
    return (
        f"contract breaks in {found.count} of {found.n} shadow pairs "
        f"({found.value:.1%}, {found.confidence:.0%} CI {found.low:.1%}-{found.high:.1%}) "
        f"exceed the limit of {thresholds.max_contract_break_rate:.1%}"
    )
