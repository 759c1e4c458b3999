"""What adapters take and return: provider-neutral requests and snapshots.

Provider JSON never leaves its adapter; the gateway sees only these models
(README.md, "Layout"; the adapter port is :mod:`adapters.port`).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contracts.job import JobState

__all__ = ["Capabilities", "ErrorClass", "ProviderRef", "ProviderSnapshot", "SubmitRequest"]


class ErrorClass(enum.StrEnum):
    """Who must act on a failed prediction (docs/providers.md, "Error classes").

    ``model_refused``: the model refused the input (a structured 4xx): the app must change
    it. ``provider_fault``: the provider could not give the outcome (its reads kept
    failing past their window, or its answers contradict each other). ``gateway_credentials``:
    the provider refused the gateway's credentials (401/403): the operator must fix the
    token.
    """

    MODEL_REFUSED = "model_refused"
    PROVIDER_FAULT = "provider_fault"
    GATEWAY_CREDENTIALS = "gateway_credentials"


class SubmitRequest(BaseModel):
    """One job handed to a provider.

    Attributes
    ----------
    job_id : str
        The gateway's prediction id; adapters that let the caller choose the upstream id
        (Cog's ``PUT /predictions/{id}``) reuse it so a retried submit is idempotent.
    input : dict
        The model input, already resolved (no gateway-local file URLs).
    webhook_url : str or None
        Where the provider should send its events (the gateway's intake, with the per-job
        token already in it), or None to rely on polling only.
    model, version : str
        The routed model (``owner/name``) and version id (or ``"hidden"``).
    deadline : datetime or None
        Absolute time after which the work is worthless (Cancel-After).
    target : str or None
        The provider's own name for the model, from the route's ``target``: a fal app id,
        a RunPod endpoint id, an OpenAI-compatible model name, a Replicate
        ``owner/name[:version]`` (docs/providers.md). None: the adapter's default.
    """

    model_config = ConfigDict(frozen=True)

    job_id: str
    input: dict[str, Any]
    webhook_url: str | None = None
    model: str
    version: str
    deadline: datetime | None = None
    target: str | None = None


class ProviderRef(BaseModel):
    """Enough to address a submitted job upstream again (fetch, cancel)."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    provider_job_id: str
    input: dict[str, Any] = Field(default_factory=dict)
    webhook_url: str | None = None
    submitted_at: datetime | None = None
    target: str | None = None


class ProviderSnapshot(BaseModel):
    """A provider's view of one job at one moment, normalised.

    Attributes
    ----------
    provider_job_id : str
        The provider's id for the job; the finalizer checks it against the stored one.
    state : JobState
        The canonical state, from the adapter's own mapping table.
    raw_status : str
        The provider's status string, kept for diagnosis.
    output : Any
        JSON output so far (final when ``state`` is terminal). File outputs appear as
        ``data:`` URIs or provider URLs; the finalizer copies them into owned storage.
    logs, error : str or None
    error_class : ErrorClass or None
        Who must act on ``error``, where the adapter knows.
    metrics : dict
        Provider metrics; ``predict_time`` in seconds when known.
    lost : bool
        True when the provider no longer knows the job and cannot report its outcome.
    provider_restarted : bool
        With ``lost``: the provider restarted after the job was submitted, so no late
        webhook can still bring the outcome (no grace period applies).
    """

    model_config = ConfigDict(frozen=True)

    provider_job_id: str
    state: JobState
    raw_status: str
    output: Any = None
    logs: str | None = None
    error: str | None = None
    error_class: ErrorClass | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    lost: bool = False
    provider_restarted: bool = False


class Capabilities(BaseModel):
    """What a provider can do; the gateway plans around the gaps.

    Attributes
    ----------
    webhooks : bool
        The provider can call back on completion.
    fetch : bool
        ``Adapter.fetch`` works (a status endpoint, or Cog's PUT probe).
    cancel : bool
        ``Adapter.cancel`` reaches the provider.
    fetch_interval_s : float
        The first interval between fetches when no webhook arrives. For Cog this is a
        watchdog probe, so it starts long.
    fetch_max_interval_s : float
        The ceiling of the exponential fetch backoff.
    lost_grace_s : float
        How long after a fetch first reports the job ``lost`` its terminal webhook may
        still arrive (the provider's own retry window); only then is the job failed.
    lost_is_idle : bool
        A job a fetch reports ``lost`` is known not to run at the provider (Cog's probe:
        a prediction in flight would have been answered), so it holds none of
        ``max_concurrency``'s slots while ``lost_grace_s`` runs. False where "lost" says
        only that this process cannot see the job (an OpenAI-compatible call held by
        another gateway process, still running): it keeps its slot.
    webhook_poke : bool
        The provider's webhooks are not signed (RunPod, providers.md §3.5): once the
        per-job URL token matches, a webhook only makes the job's next fetch due now; its
        body is never parsed or trusted.
    cancel_is_final : bool
        A cancel the provider accepted (``Adapter.cancel`` returned True) ends the job
        there: RunPod answers ``CANCELLED``, its terminal state (docs/providers.md,
        "runpod"). The gateway then ends the prediction ``canceled`` at once, and later
        reports of the job (late output) are logged, never applied.
    max_inline_input_bytes : int or None
        ``data:`` URIs longer than this are stored by the gateway and sent as its own URL
        (docs/providers.md, "File inputs"); None sends every input as it is.
    input_map : str or None
        A jq program the gateway runs on a Replicate-style input before ``submit`` when
        the route gives none for this provider (docs/translation.md, "Default maps");
        None: the adapter takes the input as it is.
    """

    model_config = ConfigDict(frozen=True)

    webhooks: bool
    fetch: bool
    cancel: bool
    fetch_interval_s: float = 1.0
    fetch_max_interval_s: float = 30.0
    lost_grace_s: float = 0.0
    lost_is_idle: bool = False
    webhook_poke: bool = False
    cancel_is_final: bool = False
    max_inline_input_bytes: int | None = None
    input_map: str | None = None
