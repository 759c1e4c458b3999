"""The internal job and its lifecycle (docs/lifecycle.md).

States move forward only::

    creating -> queued -> running -> completed | failed | canceled

``creating``: the row is committed and nothing was sent to a provider yet.
``queued``: waiting for a provider slot, or accepted by the provider but not started.
``running``: the provider reported that the work started.
The three terminal states never change. The provider's raw status is kept beside the
canonical state (``raw_status``), never instead of it.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "Job",
    "JobState",
    "can_transition",
    "replicate_status",
    "state_rank",
]


class JobState(enum.StrEnum):
    """Canonical lifecycle state of a job."""

    CREATING = "creating"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``failed`` and ``canceled``."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELED})
ACTIVE_STATES = frozenset({JobState.CREATING, JobState.QUEUED, JobState.RUNNING})

_RANK = {
    JobState.CREATING: 0,
    JobState.QUEUED: 1,
    JobState.RUNNING: 2,
    JobState.COMPLETED: 3,
    JobState.FAILED: 3,
    JobState.CANCELED: 3,
}

_REPLICATE_STATUS = {
    JobState.CREATING: "starting",
    JobState.QUEUED: "starting",
    JobState.RUNNING: "processing",
    JobState.COMPLETED: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELED: "canceled",
}


def can_transition(current: JobState, new: JobState) -> bool:
    """Whether ``current -> new`` moves forward.

    A terminal state accepts nothing (not even itself); an active state accepts any state
    of a strictly higher rank, so ``queued -> queued`` is not a transition.
    """
    if current.terminal:
        return False
    return _RANK[new] > _RANK[current]


def state_rank(state: JobState) -> int:
    """How far along the lifecycle ``state`` is: 0 creating, 1 queued, 2 running, 3 ended."""
    return _RANK[state]


def replicate_status(state: JobState) -> str:
    """The Replicate status shown to apps (docs/replicate-api.md §4.2).

    Never ``aborted``: the 1.x clients reject it (§4.3).
    """
    return _REPLICATE_STATUS[state]


class Job(BaseModel):
    """A job as the store holds it: the gateway's durable record of one prediction.

    Timestamps are timezone-aware UTC. ``version`` is a 64-hex id or ``"hidden"``
    (official-model routes, docs/replicate-api.md §2.2). ``arm`` is ``control``,
    ``candidate`` (the canary sent it to the route's candidate), ``shadow`` or
    ``baseline`` (hidden copies of the prediction ``shadow_of``); operators see it, apps
    never do.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    state: JobState
    raw_status: str | None = None
    model: str
    version: str
    deployment: str | None = None
    route: str
    provider: str
    provider_job_id: str | None = None
    target: str | None = None
    input: dict[str, Any]
    output: Any = None
    raw_output: Any = None  # operators only: a failed output check's provider output
    logs: str | None = None
    error: str | None = None
    metrics: dict[str, Any] | None = None
    created_at: datetime
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    deadline: datetime | None = None
    cancel_requested_at: datetime | None = None
    cancel_sent_at: datetime | None = None
    lost_at: datetime | None = None
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None
    attempts: int = 0
    data_removed: bool = False
    stream: bool = False
    owner: str | None = None  # the name of the API token that created it
    tenant: str = "default"  # the tenant of that token (contracts.auth.DEFAULT_TENANT)
    priority: int = 0
    arm: str = "control"
    shadow_of: str | None = None
    adopted: bool = False  # started at the legacy provider, adopted on first sight
    replay_id: str | None = None  # the replay that made this shadow (docs/cutover-day.md)
