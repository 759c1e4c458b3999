"""A fault profile: how often each fault happens in a chaos run (docs/reliability.md).

Ratios are shares in ``[0, 1]``; durations carry ``_s`` and are seconds. A profile file
is TOML with any of the fields below at the top level; a field it leaves out keeps its
default, and an unknown field is an error (a typo must not silently disable a fault).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["FaultProfile", "ProfileError", "load_profile"]

Ratio = float


class ProfileError(ValueError):
    """The profile file is missing, is not TOML, or holds an invalid value."""


class FaultProfile(BaseModel):
    """The faults of one chaos run; the defaults are the default profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- the provider's API (submit, fetch, cancel) -----------------------------------
    provider_error_ratio: Ratio = Field(0.20, ge=0, le=1)
    """Share of provider calls answered 429 or 5xx instead of being served."""
    retry_after_ratio: Ratio = Field(0.5, ge=0, le=1)
    """Share of those answers that carry ``Retry-After``."""
    retry_after_max_s: float = Field(1.0, ge=0)
    # --- provider webhooks to the gateway ----------------------------------------------
    webhook_lost_ratio: Ratio = Field(0.30, ge=0, le=1)
    webhook_duplicate_ratio: Ratio = Field(0.20, ge=0, le=1)
    webhook_late_ratio: Ratio = Field(0.10, ge=0, le=1)
    """Share sent late (so also out of order), by up to ``webhook_late_max_s``."""
    webhook_late_max_s: float = Field(5.0, ge=0)
    # --- the app's webhook receiver ------------------------------------------------------
    receiver_failing_ratio: Ratio = Field(0.05, ge=0, le=1)
    """Share of predictions whose receiver answers 503 for ``receiver_failing_s``."""
    receiver_failing_s: float = Field(3.0, ge=0)
    # --- what the app does ---------------------------------------------------------------
    cancel_ratio: Ratio = Field(0.08, ge=0, le=1)
    """Share of predictions the app cancels, up to ``cancel_max_delay_s`` after creating."""
    cancel_max_delay_s: float = Field(2.0, ge=0)
    cancel_after_ratio: Ratio = Field(0.08, ge=0, le=1)
    """Share created with a ``Cancel-After`` deadline between the two bounds below."""
    cancel_after_min_s: float = Field(5.0, ge=5)
    cancel_after_max_s: float = Field(8.0, ge=5)
    slow_run_max_s: float = Field(12.0, ge=0)
    """Those predictions ask the provider to run for up to this long (many outlive it)."""
    client_ratio: Ratio = Field(0.2, ge=0, le=1)
    """Share created through the official ``replicate`` Python client."""
    # --- the provider's jobs ---------------------------------------------------------------
    provider_failed_ratio: Ratio = Field(0.05, ge=0, le=1)
    """Share of jobs the provider itself ends ``failed``."""
    queue_max_s: float = Field(0.3, ge=0)
    run_min_s: float = Field(0.1, ge=0)
    run_max_s: float = Field(1.5, ge=0)
    max_concurrency: int = Field(16, gt=0)
    """The provider's ``max_concurrency`` in the gateway's configuration."""
    # --- the run ----------------------------------------------------------------------------
    in_flight: int = Field(64, gt=0)
    """At most this many predictions between create and terminal at once (the app side)."""
    terminal_within_s: float = Field(120.0, gt=0)
    """Deadline of a prediction without ``Cancel-After``, from its creation."""
    cancel_grace_s: float = Field(10.0, gt=0)
    """The gateway's ``cancel_grace_s`` in the run."""

    @model_validator(mode="after")
    def _ordered_bounds(self) -> FaultProfile:
        if self.run_min_s > self.run_max_s:
            raise ValueError("run_min_s is above run_max_s")
        if self.cancel_after_min_s > self.cancel_after_max_s:
            raise ValueError("cancel_after_min_s is above cancel_after_max_s")
        return self


def load_profile(path: Path | None) -> FaultProfile:
    """The profile in the TOML file at ``path``; the default profile when None.

    Raises
    ------
    ProfileError
        The file cannot be read, is not TOML, or holds an unknown or invalid field.
    """
    if path is None:
        return FaultProfile()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"cannot read the fault profile {path}: {exc}") from exc
    try:
        return FaultProfile.model_validate(data)
    except ValidationError as exc:
        why = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'profile'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ProfileError(f"invalid fault profile {path}: {why}") from exc
