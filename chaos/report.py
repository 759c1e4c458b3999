"""The report of a chaos run: counts, faults injected, time to terminal, every violation."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chaos.check import Violation

__all__ = ["Report", "percentile"]


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass
class Report:
    """What a run did and found; :attr:`ok` when no promise was broken."""

    predictions: int
    seconds: float
    statuses: Counter[str]
    plans: Counter[str]
    faults: Counter[str]
    times_s: list[float]
    peak_concurrency: int
    max_concurrency: int
    gateways: int
    violations: list[Violation] = field(default_factory=list)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        """The figures as plain data (``--json``), violations included."""
        return {
            "predictions": self.predictions,
            "seconds": round(self.seconds, 1),
            "gateways": self.gateways,
            "statuses": dict(self.statuses),
            "plans": dict(self.plans),
            "faults_injected": dict(sorted(self.faults.items())),
            "faults_total": sum(self.faults.values()),
            "time_to_terminal_s": {
                "p50": _round(percentile(self.times_s, 0.50)),
                "p99": _round(percentile(self.times_s, 0.99)),
                "max": _round(max(self.times_s, default=None)),
            },
            "provider_peak_concurrency": self.peak_concurrency,
            "provider_max_concurrency": self.max_concurrency,
            "violations": [v.line() for v in self.violations],
        }

    def text(self) -> str:
        """The human report printed by ``cutover chaos``."""
        s = self.summary()
        t = s["time_to_terminal_s"]
        lines = [
            f"cutover chaos: {self.predictions} predictions in {s['seconds']} s "
            f"through {self.gateways} gateway process(es)",
            "  final status     " + _pairs(self.statuses),
            "  app behaviour    " + _pairs(self.plans),
            f"  faults injected  {s['faults_total']}: " + _pairs(self.faults),
            f"  time to terminal p50 {t['p50']} s, p99 {t['p99']} s, max {t['max']} s",
            f"  provider jobs at once: peak {self.peak_concurrency} "
            f"(max_concurrency {self.max_concurrency})",
        ]
        if self.workdir:
            lines.append(f"  work directory   {self.workdir}")
        if self.ok:
            lines.append("every promise kept: 0 violations")
        else:
            lines.append(f"{len(self.violations)} VIOLATIONS:")
            lines += [f"  {v.line()}" for v in self.violations]
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps(self.summary(), indent=2)


def _pairs(counts: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
