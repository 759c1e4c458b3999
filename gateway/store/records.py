"""The store's row types: what the job store takes and returns besides jobs, the state sets
its SQL names, a stored provider event, and an outbox row with its delivery status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from contracts.auth import DEFAULT_TENANT
from contracts.job import ACTIVE_STATES, TERMINAL_STATES, Job, JobState
from gateway.store.engine.errors import ValueRefused

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "TERMINAL_DELIVERY_STATUSES",
    "UNSUBMITTED",
    "AssetRecord",
    "DeliveryStatus",
    "NewJob",
    "OutboxRow",
    "Outcome",
    "Progress",
    "ProviderEvent",
    "ValueRefused",
    "job_from_row",
    "new_row",
    "storable_text",
]

ACTIVE = [s.value for s in ACTIVE_STATES]
UNSUBMITTED = [JobState.CREATING.value, JobState.QUEUED.value]
TERMINAL = [s.value for s in TERMINAL_STATES]


@dataclass(frozen=True)
class NewJob:
    """A validated, routed create request, ready to be stored."""

    id: str
    model: str
    version: str
    deployment: str | None
    route: str
    provider: str
    input: dict[str, Any]
    callback_token: str
    target: str | None = None
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None
    deadline: datetime | None = None
    stream: bool = False
    idempotency_key: str | None = None
    request_hash: str | None = None
    created_at: datetime | None = None
    owner: str | None = None  # the API token's name: fair dispatch across apps
    tenant: str = DEFAULT_TENANT  # that token's tenant: who may read it (docs/security.md)
    priority: int = 0  # the route's: higher is dispatched first
    arm: str = "control"
    shadow_of: str | None = None
    logs: str | None = None  # the input note (gateway.validation.CheckedInput.note)
    skipped: str | None = None  # a shadow not run: stored canceled with this error
    replay_id: str | None = None  # the replay that made this shadow (gateway/store/replays.py)


def new_row(new: NewJob, now: datetime) -> dict[str, Any]:
    """The ``jobs`` row of a new job in state ``creating``, created at ``now``; a skipped
    shadow's (``skipped``) is born ``canceled`` with that error, never dispatched."""
    row = {key: value for key, value in new.__dict__.items() if key != "skipped"}
    return {
        **row,
        "state": JobState.CANCELED.value if new.skipped else JobState.CREATING.value,
        "error": new.skipped,
        "completed_at": now if new.skipped else None,
        "raw_status": None,
        "created_at": now,
        "updated_at": now,
        "next_attempt_at": now,
        "attempts": 0,
    }


@dataclass(frozen=True)
class Progress:
    """A non-terminal observation: forward state, output and logs so far."""

    state: JobState
    raw_status: str
    output: Any = None
    logs: str | None = None


@dataclass(frozen=True)
class AssetRecord:
    """A file copied into owned storage for a job."""

    key: str
    sha256: str
    size_bytes: int
    content_type: str
    source: str


@dataclass(frozen=True)
class Outcome:
    """The terminal result the finalizer records."""

    state: JobState
    raw_status: str
    output: Any = None
    logs: str | None = None
    error: str | None = None
    metrics: dict[str, Any] | None = None
    assets: Sequence[AssetRecord] = ()
    #: The provider's id for the job, stored when the job has none yet (its terminal
    #: webhook overtook a submit that was never recorded: docs/lifecycle.md).
    provider_job_id: str | None = None
    #: The provider's output of a job failed by its output check, kept for operators.
    raw_output: Any = None


def storable_text(value: str | None) -> str | None:
    """Provider text made storable everywhere: PostgreSQL text cannot hold NUL."""
    return None if value is None else value.replace("\x00", "\ufffd")


def job_from_row(row: sa.Row[Any]) -> Job:
    """A ``jobs`` row as the contract's :class:`~contracts.job.Job`."""
    return Job.model_validate(dict(row._mapping))


# --- provider events and outbox rows ------------------------------------------------


@dataclass(frozen=True)
class ProviderEvent:
    """One stored provider webhook: ``body`` is the raw, verified request body."""

    id: int
    job_id: str
    provider: str
    body: bytes


class DeliveryStatus(StrEnum):
    """An outbox row's ``status`` (docs/webhooks.md, "Outcomes, retries and dead letters").

    Only ``pending`` rows are sent; every other status is terminal (:attr:`terminal`)
    until an operator replays a ``dead`` one, which puts it back to ``pending``.
    """

    PENDING = "pending"  # waiting for its first attempt or a retry
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"  # dead-lettered: listed and replayable
    SUPERSEDED = "superseded"  # never sent: a later snapshot or the completed event won
    DROPPED = "dropped"  # a non-terminal event whose one attempt failed

    @property
    def terminal(self) -> bool:
        """True for every status but ``pending``: the row is settled, nothing sends it."""
        return self in TERMINAL_DELIVERY_STATUSES


TERMINAL_DELIVERY_STATUSES = frozenset(
    {
        DeliveryStatus.DELIVERED,
        DeliveryStatus.DEAD,
        DeliveryStatus.SUPERSEDED,
        DeliveryStatus.DROPPED,
    }
)


@dataclass(frozen=True)
class OutboxRow:
    """A leased row: ``payload`` is the exact JSON to send, ``attempts`` counts this one;
    ``job_id`` None: an operator webhook event (:mod:`gateway.store.operatorhook`)."""

    id: int
    job_id: str | None
    msg_id: str
    event: str
    url: str
    payload: str
    attempts: int
