"""The canary guard's judgement, without I/O (docs/canary.md, "Guard").

:func:`evaluate` compares the candidate arm's recent predictions with the control's
against a route's :class:`gateway.rollout.spec.GuardSettings` and returns the first breach, with
the numbers behind it, or None. The loop that gathers the samples and rolls the canary
back is :mod:`gateway.rollout.guardloop`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gateway.rollout.spec import GuardSettings

__all__ = ["ArmStats", "Breach", "PairStats", "Sample", "evaluate", "percentile", "summarize"]


@dataclass(frozen=True)
class Sample:
    """One finished prediction: its arm, whether it failed, and its latency in seconds
    (creation to terminal state)."""

    arm: str
    failed: bool
    latency_s: float


@dataclass(frozen=True)
class ArmStats:
    """Counts, error rate (0-1) and latency percentiles (seconds) of one arm.

    ``count``, ``failed`` and the latencies are finished predictions'; ``stuck`` (the
    candidate's only) counts those its provider has not taken ``max_queue_s`` after their
    create, and the error rate is ``(failed + stuck) / (count + stuck)``."""

    count: int
    failed: int
    error_rate: float | None
    p50_s: float | None
    p95_s: float | None
    stuck: int = 0


@dataclass(frozen=True)
class PairStats:
    """Compared candidate shadow pairs, how many broke the contract, and the breach
    sentence of :func:`shadow.noise.contract_breach` (None: no breach)."""

    pairs: int
    breaks: int
    breach: str | None = None


@dataclass(frozen=True)
class Breach:
    """Why the guard rolls back (one line) and the samples behind it."""

    reason: str
    evidence: dict[str, Any]


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (``fraction`` 0-1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(samples: Iterable[Sample], stuck: int = 0) -> ArmStats:
    """The :class:`ArmStats` of one arm's samples and ``stuck`` predictions."""
    latencies: list[float] = []
    failed = 0
    for sample in samples:
        latencies.append(sample.latency_s)
        failed += sample.failed
    count = len(latencies)
    return ArmStats(
        count=count,
        failed=failed,
        error_rate=(failed + stuck) / (count + stuck) if count + stuck else None,
        p50_s=percentile(latencies, 0.5),
        p95_s=percentile(latencies, 0.95),
        stuck=stuck,
    )


def evaluate(
    guard: GuardSettings,
    control: ArmStats,
    candidate: ArmStats,
    pairs: PairStats | None = None,
) -> Breach | None:
    """The first threshold the candidate breaches, or None.

    Checked in order: error rate, p95 latency ratio, contract-break rate. The first two
    are not judged over fewer than ``guard.min_samples`` samples (on both arms for the
    ratio; stuck predictions are samples of the error rate only); contract breaks count
    when the guard has ``max_contract_break_rate`` and ``pairs.breach`` says the share is
    clearly above it (a Wilson lower bound).
    """
    evidence = {
        "window_s": guard.window_s,
        "min_samples": guard.min_samples,
        "control": asdict(control),
        "candidate": asdict(candidate),
        **({"shadow_pairs": {"pairs": pairs.pairs, "breaks": pairs.breaks}} if pairs else {}),
    }
    enough = candidate.count >= guard.min_samples
    limit = guard.max_error_rate
    judged = candidate.count + candidate.stuck
    if limit is not None and judged >= guard.min_samples and candidate.error_rate is not None:
        if candidate.error_rate > limit:
            stuck = candidate.stuck
            return Breach(
                f"candidate error rate {candidate.error_rate:.1%} > {limit:.1%} "
                f"({candidate.failed + stuck} of {judged}"
                + (f"; {stuck} not taken by the provider within {guard.max_queue_s:g} s)"
                   if stuck else ")"),
                evidence,
            )
    ratio_limit = guard.max_p95_ratio
    if ratio_limit is not None and enough and control.count >= guard.min_samples:
        if candidate.p95_s is not None and control.p95_s is not None:
            ratio = candidate.p95_s / max(control.p95_s, 1e-6)
            if ratio > ratio_limit:
                return Breach(
                    f"candidate p95 latency {candidate.p95_s:.3f} s is {ratio:.2f}x the "
                    f"control's {control.p95_s:.3f} s (> {ratio_limit:g}x)",
                    evidence,
                )
    if guard.max_contract_break_rate is not None and pairs is not None and pairs.breach:
        return Breach(f"shadow {pairs.breach}", evidence)
    return None
