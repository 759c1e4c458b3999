"""How a snapshot relates to the job the store holds (older, or news) and what it writes.

Pure functions for :mod:`gateway.store.jobs`; the rule is explained in
:func:`moves_back` and in docs/lifecycle.md, "Ordering".
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from contracts.job import Job, JobState, can_transition, state_rank
from gateway.store.records import Outcome, Progress, storable_text

__all__ = [
    "lock_key", "moves_back", "outcome_values", "predicted", "progress_columns", "progress_values",
]


def moves_back(old: Job, progress: Progress) -> bool:
    """Whether ``progress`` is an older snapshot than what ``old`` holds.

    Cog posts its webhooks concurrently, so they arrive out of order, and carries no
    sequence number; but a prediction's state only moves forward and its output list and
    logs only grow (docs/lifecycle.md, "Ordering"). So a snapshot is older when its state
    ranks below the job's, when its output is a list the stored list strictly extends,
    or when its logs are a strict prefix of the stored logs. Anything else is news.
    """
    if state_rank(progress.state) < state_rank(old.state):
        return True
    new_out, old_out = progress.output, old.output
    if isinstance(new_out, list) and isinstance(old_out, list):
        if len(new_out) < len(old_out) and old_out[: len(new_out)] == new_out:
            return True
    new_logs, old_logs = storable_text(progress.logs), old.logs
    return bool(new_logs is not None and old_logs and new_logs != old_logs
                and old_logs.startswith(new_logs))


def progress_values(old: Job, progress: Progress, now: datetime) -> dict[str, Any]:
    """The columns ``progress`` changes on ``old`` (empty when it brings nothing new)."""
    values: dict[str, Any] = {}
    if progress.raw_status != old.raw_status:
        values["raw_status"] = progress.raw_status
    if can_transition(old.state, progress.state):
        values["state"] = progress.state.value
        if progress.state is JobState.RUNNING and old.started_at is None:
            values["started_at"] = now
    if progress.output is not None and progress.output != old.output:
        values["output"] = progress.output
    logs = storable_text(progress.logs)
    if logs is not None and logs != old.logs:
        values["logs"] = logs
    return values


def progress_columns(old: Job, progress: Progress, now: datetime) -> dict[str, Any]:
    """The columns (name -> value) the non-terminal ``progress`` writes on the active job
    ``old`` at ``now``, ``updated_at`` among them; empty when it brings nothing new (an
    older snapshot, :func:`moves_back`, or the same one again)."""
    if moves_back(old, progress):
        return {}
    values = progress_values(old, progress, now)
    return {**values, "updated_at": now} if values else {}


def predicted(old: Job, values: dict[str, Any]) -> Job:
    """The job ``values`` (column -> value) would make of ``old``."""
    fields = {k: v for k, v in values.items() if k in Job.model_fields}
    if "state" in fields:
        fields["state"] = JobState(fields["state"])
    return old.model_copy(update=fields)


def outcome_values(old: Job, outcome: Outcome, now: datetime) -> dict[str, Any]:
    """The columns the terminal ``outcome`` writes on the active job ``old``."""
    values: dict[str, Any] = {
        "state": outcome.state.value,
        "raw_status": outcome.raw_status,
        "error": storable_text(outcome.error),
        "metrics": outcome.metrics or {},
        "completed_at": now,
        "updated_at": now,
        "next_attempt_at": None,
        "lease_owner": None,
        "leased_until": None,
        # Failed and canceled jobs keep no output: only copied files are owned.
        "output": outcome.output if outcome.state is JobState.COMPLETED else None,
    }
    if outcome.raw_output is not None:
        values["raw_output"] = outcome.raw_output
    if outcome.logs is not None:
        values["logs"] = storable_text(outcome.logs)
    if old.started_at is None and outcome.state is JobState.COMPLETED:
        values["started_at"] = old.submitted_at or now
    if old.provider_job_id is None and outcome.provider_job_id is not None:
        values["provider_job_id"] = outcome.provider_job_id  # its submit was never recorded
    if old.submitted_at is None and outcome.provider_job_id is not None:
        values["submitted_at"] = now  # a submit that answered with the result
    return values


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for a PostgreSQL advisory lock on ``name``."""
    digest = hashlib.sha256(f"cutover:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
