"""A route's live traffic settings, and the audit record of a change (docs/canary.md).

A route's *spec* is what an operator changes while the gateway runs: the control
``provider``, the ``candidate``, the canary and shadow percents, the caller key that
makes the canary sticky, the guard thresholds, and the shadow input policy
(:class:`shadow.policy.ShadowPolicy`; none: nothing is shadowed), budget, baseline share
and comparison thresholds (:class:`shadow.thresholds.Thresholds`), and its ``maps``
per provider (:class:`gateway.translation.maps.MapSpec`, docs/translation.md).
The config file seeds it; the store holds it (:mod:`gateway.store.routes`). A route as
configured (``[[routes]]``, :class:`RouteSettings`) is its spec plus what only the config
file says: which model, version or deployment it serves, the providers' own names for
the model, its input schema and its priority; :meth:`RouteSettings.spec` is the spec it
seeds. Every model here is frozen and refuses unknown fields, so a malformed change is
refused whole.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contracts.replicate import VERSION_ID_RE
from gateway.translation.maps import MapSpec, map_problems
from shadow.policy import ShadowPolicy
from shadow.thresholds import Thresholds

__all__ = [
    "ARMS",
    "HIDDEN_ARMS",
    "AuditEntry",
    "CallerKey",
    "GuardSettings",
    "RouteSettings",
    "RouteSpec",
    "ShadowBudget",
    "change_problem",
    "parse_caller_key",
    "route_key",
    "stuck_after",
]

#: ``shadow`` runs a control prediction's input on the candidate, ``baseline`` on the
#: control a second time (the noise baseline, docs/shadow.md); apps never see either.
ARMS = ("control", "candidate", "shadow", "baseline")
HIDDEN_ARMS = ("shadow", "baseline")
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def route_key(model: str, version: str | None) -> str:
    """A route's name as written in the config: ``model`` or ``model:version``."""
    return f"{model}:{version}" if version else model


class CallerKey(_Frozen):
    """What identifies a caller for the sticky canary: the API token (default), a request
    header, or a top-level input field."""

    source: Literal["token", "header", "input"] = "token"
    name: str | None = None

    def __str__(self) -> str:
        return self.source if self.name is None else f"{self.source}:{self.name}"


def parse_caller_key(text: str) -> CallerKey:
    """``token``, ``header:X-User`` or ``input:user_id`` as a :class:`CallerKey`.

    Raises
    ------
    ValueError
        Any other form, or a header or field name that cannot be one.
    """
    source, sep, name = text.partition(":")
    if source == "token" and not sep:
        return CallerKey()
    if source == "header" and _HEADER_RE.match(name):
        return CallerKey(source="header", name=name)
    if source == "input" and _FIELD_RE.match(name):
        return CallerKey(source="input", name=name)
    raise ValueError(
        f"caller_key {text!r} is not 'token', 'header:NAME' or 'input:FIELD'"
    )


class GuardSettings(_Frozen):
    """Thresholds that roll a canary back to 0 by themselves (docs/canary.md, "Guard").

    A breach is any of: the candidate's error rate above ``max_error_rate`` (0-1); its
    p95 latency above ``max_p95_ratio`` times the control's; the shadow contract-break
    rate clearly above ``max_contract_break_rate`` (0-1: the Wilson lower bound of the
    share of candidate pairs, :func:`shadow.noise.contract_breach`). Only predictions
    finished within the last ``window_s`` seconds count, and the error rate and latency
    are judged only over at least ``min_samples`` of them (on each arm, for the ratio).
    A candidate-arm prediction created after the route's last change that its provider
    has still not taken ``max_queue_s`` after its create, its last submit failed, counts
    as failed in the error rate ("stuck"; docs/canary.md, "A candidate that never takes
    the work"); so does one taken but still not finished ``stuck_after_s`` after its
    create (None: :func:`stuck_after`'s default from the control's p95).
    """

    max_error_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    max_p95_ratio: float | None = Field(default=None, gt=0.0)
    max_contract_break_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    min_samples: int = Field(default=20, ge=1, le=1_000_000)
    window_s: float = Field(default=300.0, gt=0.0, le=7 * 86400.0)
    max_queue_s: float = Field(default=30.0, gt=0.0, le=86400.0)
    stuck_after_s: float | None = Field(default=None, gt=0.0, le=86400.0)

    @model_validator(mode="after")
    def _some_threshold(self) -> GuardSettings:
        if self.max_p95_ratio is not None and not math.isfinite(self.max_p95_ratio):
            raise ValueError("max_p95_ratio must be a finite number")
        if (self.max_error_rate, self.max_p95_ratio, self.max_contract_break_rate) == (
            None,
            None,
            None,
        ):
            raise ValueError(
                "a guard needs at least one of max_error_rate, max_p95_ratio, "
                "max_contract_break_rate"
            )
        return self


#: ``stuck_after_s`` when the guard does not set it: this many times the control's p95,
#: within the bounds below; :data:`STUCK_AFTER_NO_CONTROL_S` while the control has none.
STUCK_AFTER_P95_FACTOR = 5.0
STUCK_AFTER_MIN_S = 10.0
STUCK_AFTER_MAX_S = 300.0
STUCK_AFTER_NO_CONTROL_S = 30.0


def stuck_after(guard: GuardSettings, control_p95_s: float | None) -> float:
    """Seconds after its create from which a candidate prediction taken but not finished
    counts as stuck: the guard's ``stuck_after_s``, else 5 x the control's p95 within
    10-300 s, else 30 s (docs/canary.md, "Numbers")."""
    if guard.stuck_after_s is not None:
        return guard.stuck_after_s
    if control_p95_s is None:
        return STUCK_AFTER_NO_CONTROL_S
    scaled = STUCK_AFTER_P95_FACTOR * control_p95_s
    return min(max(scaled, STUCK_AFTER_MIN_S), STUCK_AFTER_MAX_S)


class ShadowBudget(_Frozen):
    """How many shadows a route may have running at once and start per hour; a shadow
    over budget is dropped, never queued. ``max_wait_s``: a shadow still waiting at the
    gateway for its provider (at capacity) that long after its creation is dropped."""

    max_concurrent: int = Field(default=2, ge=0)
    max_per_hour: int = Field(default=100, ge=0)
    max_wait_s: float = Field(default=300.0, gt=0)


class RouteSpec(_Frozen):
    """A route's live traffic settings (see the module docstring)."""

    provider: str
    candidate: str | None = None
    canary_percent: float = Field(default=0.0, ge=0.0, le=100.0)
    shadow_percent: float = Field(default=0.0, ge=0.0, le=100.0)
    baseline_percent: float = Field(default=20.0, ge=0.0, le=100.0)
    caller_key: CallerKey = Field(default_factory=CallerKey)
    guard: GuardSettings | None = None
    shadow_policy: ShadowPolicy | None = None
    shadow_budget: ShadowBudget = Field(default_factory=ShadowBudget)
    shadow_thresholds: Thresholds = Field(default_factory=Thresholds)
    maps: dict[str, MapSpec] = Field(default_factory=dict)
    #: Set live only (``cutover routes pause-guard``): the guard still counts, never acts.
    guard_paused: bool = False

    @field_validator("caller_key", mode="before")
    @classmethod
    def _caller_key_text(cls, value: Any) -> Any:
        return parse_caller_key(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _candidate_needed(self) -> RouteSpec:
        if self.canary_percent and not self.candidate:
            raise ValueError("canary_percent needs a candidate provider")
        if self.shadow_percent and not self.candidate:
            raise ValueError("shadow_percent needs a candidate provider")
        if self.candidate is not None and self.candidate == self.provider:
            raise ValueError("the candidate must be another provider than the control")
        return self

    @model_validator(mode="after")
    def _maps_compile(self) -> RouteSpec:
        """A map that does not compile is refused with jq's message (docs/translation.md)."""
        if problems := map_problems(self.maps):
            raise ValueError("; ".join(problems))
        return self

    def stored(self) -> dict[str, Any]:
        """The JSON form kept in the store (``caller_key`` as its text form;
        ``guard_paused`` only while true and ``maps`` only when there are some, so a spec
        stored before they existed, and its config digest, read the same:
        :func:`gateway.store.routes.config_hash`)."""
        data = self.model_dump(mode="json", exclude={"caller_key", "guard_paused", "maps"})
        if data["guard"] is not None and data["guard"]["stuck_after_s"] is None:
            del data["guard"]["stuck_after_s"]  # the default: digests of older specs hold
        if self.guard_paused:
            data["guard_paused"] = True
        if self.maps:
            data["maps"] = {name: spec.model_dump(mode="json") for name, spec in self.maps.items()}
        return {**data, "caller_key": str(self.caller_key)}


class RouteSettings(RouteSpec):
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
    The spec's fields (``provider`` to ``shadow_thresholds``) come from :class:`RouteSpec`.
    """

    model: str
    version: str | None = None
    deployment: str | None = None
    target: str | None = Field(default=None, min_length=1, max_length=255)
    candidate_target: str | None = Field(default=None, min_length=1, max_length=255)
    openapi_schema: dict[str, Any] | str | None = None
    strict_inputs: bool = False
    priority: int = Field(default=0, ge=-100, le=100)
    tenants: list[str] | None = Field(default=None, min_length=1)

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
    def _maps_compile(self) -> RouteSettings:
        """As the spec's check, naming the route: a map that does not compile stops the
        gateway (and ``cutover check``) naming the route, the provider and jq's message."""
        if problems := map_problems(self.maps):
            raise ValueError(f"route {route_key(self.model, self.version)}: " + "; ".join(problems))
        return self

    def spec(self) -> RouteSpec:
        """The live spec this route seeds."""
        return RouteSpec.model_validate(self.model_dump(include=set(RouteSpec.model_fields)))


def change_problem(before: RouteSpec, after: RouteSpec) -> str | None:
    """Why a live change from ``before`` to ``after`` is refused though ``after`` is a valid
    spec, or None. A change that leaves the route shadowing without a ``shadow_policy``
    (setting a shadow percent, or removing the policy while shadowing) would shadow
    nothing, silently: no input is shadowed without a policy (docs/shadow.md, "Policy")."""
    shadowing = after.shadow_percent > 0 and after.shadow_policy is None
    touched = (before.shadow_percent != after.shadow_percent
               or before.shadow_policy != after.shadow_policy)
    if shadowing and touched:
        return (f"shadow_percent {after.shadow_percent:g} needs a shadow_policy: without one no "
                "input is shadowed (docs/shadow.md, \"Policy\"); give the route a "
                "shadow_policy first (the admin API's PATCH /admin/routes/<route>, or the "
                "config file)")
    return None


class AuditEntry(_Frozen):
    """One change of one route: who (an admin token's name, ``cli``, ``config`` or
    ``guard``), when, the spec before and after, why, and for the guard the samples."""

    id: int
    route: str
    at: datetime
    who: str
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any]
    reason: str
    evidence: dict[str, Any] | None = None
