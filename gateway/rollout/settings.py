"""``[[routes]]`` of the configuration (:mod:`gateway.config`): one route's settings.

Re-exported by :mod:`gateway.config`; see docs/canary.md and docs/providers.md.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contracts.replicate import VERSION_ID_RE
from gateway.rollout.spec import (
    CallerKey,
    GuardSettings,
    ShadowBudget,
    parse_caller_key,
    route_key,
)
from shadow.policy import ShadowPolicy
from shadow.thresholds import Thresholds

__all__ = ["RouteSettings"]

_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouteSettings(_Section):
    """``[[routes]]``: which provider serves a model (optionally one version of it).

    ``provider`` is the control; ``candidate`` with ``canary_percent`` (0-100) sends that
    share of new predictions to the candidate instead. ``openapi_schema`` is the model's
    schema (docs/validation.md): inline, a path to a JSON file, or ``"provider"`` to read
    it once from the provider (a built Cog image's ``/openapi.json``); undeclared input
    fields are dropped, or refused (422) with ``strict_inputs``. ``priority``
    (-100..100, default 0): when a provider is at capacity, waiting jobs of higher-priority
    routes go first (docs/limits.md).
    ``target`` is the control provider's own name for the model (a fal app id, a RunPod
    endpoint id, an OpenAI-compatible model name, a Replicate ``owner/name[:version]``;
    docs/providers.md), ``candidate_target`` the candidate's.
    The canary sends that
    share of callers (by ``caller_key``: ``token``, ``header:NAME`` or ``input:FIELD``) to
    the candidate instead; ``shadow_percent`` of the control's predictions that pass
    ``shadow_policy`` (none: nothing is shadowed) also run hidden, within
    ``shadow_budget``: on the candidate, or for ``baseline_percent`` of them on the control
    a second time (the noise baseline), compared under ``shadow_thresholds``;
    ``guard`` rolls the canary back on a breach. These seed the route's live spec in the
    store on first start (docs/canary.md); later changes go through ``cutover routes``.
    """

    model: str
    version: str | None = None
    deployment: str | None = None
    provider: str
    target: str | None = Field(default=None, min_length=1, max_length=255)
    candidate_target: str | None = Field(default=None, min_length=1, max_length=255)
    candidate: str | None = None
    canary_percent: float = Field(default=0.0, ge=0.0, le=100.0)
    openapi_schema: dict[str, Any] | str | None = None
    strict_inputs: bool = False
    priority: int = Field(default=0, ge=-100, le=100)
    shadow_percent: float = Field(default=0.0, ge=0.0, le=100.0)
    baseline_percent: float = Field(default=20.0, ge=0.0, le=100.0)
    caller_key: CallerKey = Field(default_factory=CallerKey)
    guard: GuardSettings | None = None
    shadow_policy: ShadowPolicy | None = None
    shadow_budget: ShadowBudget = Field(default_factory=ShadowBudget)
    shadow_thresholds: Thresholds = Field(default_factory=Thresholds)

    @field_validator("caller_key", mode="before")
    @classmethod
    def _caller_key_text(cls, value: Any) -> Any:
        return parse_caller_key(value) if isinstance(value, str) else value

    @field_validator("model", "deployment")
    @classmethod
    def _owner_name(cls, value: str | None) -> str | None:
        if value is not None and not _MODEL_RE.match(value):
            raise ValueError(f"{value!r} is not owner/name")
        return value

    @field_validator("version")
    @classmethod
    def _version_id(cls, value: str | None) -> str | None:
        if value is not None and not VERSION_ID_RE.match(value):
            raise ValueError(f"version {value!r} is not a 64-character lowercase hex id")
        return value

    @model_validator(mode="after")
    def _storable(self) -> RouteSettings:
        """Each prediction stores these, in columns of 255 characters."""
        for what, name in (("model", self.model), ("deployment", self.deployment),
                           ("route", route_key(self.model, self.version))):
            if name is not None and len(name) > 255:  # jobs.model, deployment, route
                raise ValueError(f"the {what} {name[:40]!r}... is longer than 255 characters")
        return self

    @model_validator(mode="after")
    def _canary(self) -> RouteSettings:
        if self.canary_percent and not self.candidate:
            raise ValueError("canary_percent needs a candidate provider")
        if self.shadow_percent and not self.candidate:
            raise ValueError("shadow_percent needs a candidate provider")
        if self.candidate is not None and self.candidate == self.provider:
            raise ValueError("the candidate must be another provider than the control")
        return self
