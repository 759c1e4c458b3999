"""A route's comparison and promotion thresholds (docs/shadow.md, "Thresholds").

One frozen, JSON-serialisable model the gateway stores per route and passes to
:mod:`shadow.noise` and :mod:`shadow.report`. Unknown keys and unknown measure names are
rejected (``pydantic.ValidationError`` with the offending field), so a malformed setting
is refused before it changes anything.
"""

from __future__ import annotations

from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shadow.measures import MEASURES

__all__ = ["DEFAULT_MARGINS", "Thresholds"]

DEFAULT_MARGINS = MappingProxyType({
    "error_class": 0.0,
    "list_length": 0.0,
    "number": 0.05,
    "text": 0.10,
    "file_size": 0.25,
    "file_bytes": None,
    "image_size": 0.0,
    "image_phash": 10.0,
    "image_color": 3.0,
    "text_exact": 0.0,
    "text_edit": 0.10,
    "text_length": 0.25,
    "json_valid": 0.0,
    "json_keys": 0.0,
})
"""Per measure, how far above the baseline quantile a value must be to count as a
difference, in the measure's unit (see :data:`shadow.compare.MEASURES`). None: shown in
reports, never judged (``file_bytes``: a re-encoded but identical picture is no
difference)."""


class Thresholds(BaseModel):
    """How a route's pairs are judged and when its candidate may be promoted.

    Attributes
    ----------
    baseline_quantile : float
        The quantile of the control-vs-control values a candidate value is held against
        (0.5 < q <= 1; the "higher" empirical quantile, so 0.99 of 50 pairs is the maximum).
    min_baseline_pairs : int
        Fewer control-vs-control pairs than this and the baseline is not used: every
        measure is held against its margin alone, as for a deterministic model.
    margins : dict of str to float or None
        Overrides of :data:`DEFAULT_MARGINS`, by measure name; None makes a measure
        informational.
    min_pairs : int
        Control-vs-candidate pairs needed before the verdict can be "promote".
    max_contract_break_rate, max_difference_rate : float
        The highest acceptable share (0-1) of pairs with a contract break, and of pairs
        with any reported difference; promotion needs the upper confidence bound at or
        below it, a block needs the lower bound above it.
    max_p95_latency_ratio : float or None
        Candidate p95 run time over control p95 run time; None disables the check.
    max_cost_ratio : float or None
        Candidate mean cost over control mean cost, where both report cost.
    confidence : float
        Two-sided confidence of the Wilson intervals (0.5 < c < 1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    baseline_quantile: float = Field(default=0.99, gt=0.5, le=1.0)
    min_baseline_pairs: int = Field(default=20, ge=1)
    margins: dict[str, float | None] = Field(default_factory=dict)
    min_pairs: int = Field(default=100, ge=1)
    max_contract_break_rate: float = Field(default=0.02, ge=0.0, le=1.0)
    max_difference_rate: float = Field(default=0.05, ge=0.0, le=1.0)
    max_p95_latency_ratio: float | None = Field(default=1.5, gt=0.0)
    max_cost_ratio: float | None = Field(default=None, gt=0.0)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)

    @field_validator("margins")
    @classmethod
    def _known_measures(cls, margins: dict[str, float | None]) -> dict[str, float | None]:
        unknown = sorted(set(margins) - set(MEASURES))
        if unknown:
            raise ValueError(
                f"unknown measure(s) {', '.join(unknown)}; known: {', '.join(MEASURES)}"
            )
        negative = sorted(name for name, value in margins.items() if value is not None
                          and not value >= 0)
        if negative:
            raise ValueError(f"margins must be >= 0: {', '.join(negative)}")
        return margins

    def margin(self, measure: str) -> float | None:
        """The margin of one measure (override, else default); None if not judged."""
        if measure in self.margins:
            return self.margins[measure]
        return DEFAULT_MARGINS.get(measure)
