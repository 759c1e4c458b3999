"""Rescue on rollback: the candidate's predictions it never took move to the control.

When a route rolls back (docs/canary.md, "Rescue on rollback"), a candidate-arm
prediction that the candidate provably never accepted runs on the control instead of
waiting there until the lifetime cap. Provably: still unsubmitted (``creating`` or
``queued``, no ``submitted_at``, no provider job id), not canceled, not leased (no submit
under way in any process), and either never tried (``raw_status`` None) or last refused
a connection (:data:`gateway.dispatcher.NOT_CONNECTED`: nothing was sent). A submit that
failed in transit, timed out, was told busy, or whose process died mid-submit (``raw_status``
``unreachable``, ``submitting``, ``resubmitting``, ``busy``, ``crashed``) may have reached
the candidate: such a prediction stays there, so nothing runs twice.

The move is one guarded ``UPDATE`` in the route change's transaction: provider, target
and arm become the control's, the job is due at once, and its logs start with a
:data:`gateway.validation.RESCUED_NOTE` line (kept ahead
of the provider's logs). Two rollbacks at once move each job once (the second finds
it on the control).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from contracts.job import JobState
from gateway.store import lease
from gateway.store.engine.aio import Connection
from gateway.store.schema import jobs
from gateway.validation import RESCUED_NOTE

__all__ = ["NEVER_SENT", "RESCUED_NOTE", "Rescue", "rescue"]

#: ``raw_status`` of an unsubmitted job whose submits, if any, sent nothing: never
#: tried, or last found no connection (the dispatcher's ``NOT_CONNECTED``).
NEVER_SENT = "not_connected"


@dataclass(frozen=True)
class Rescue:
    """Where route ``route``'s never-accepted candidate predictions go: from provider
    ``candidate`` to ``control`` under its ``target``; ``why`` ends the logs line."""

    route: str
    candidate: str
    control: str
    target: str | None
    why: str


async def rescue(conn: Connection, move: Rescue, now: datetime) -> list[str]:
    """Move the predictions ``move`` describes (see the module docstring) in ``conn``'s
    transaction; their ids come back, oldest first."""
    note = (f"{RESCUED_NOTE}candidate {move.candidate!r} never accepted this prediction; "
            f"it runs on {move.control!r} ({move.why})\n")
    statement = (
        jobs.update()
        .where(
            jobs.c.route == move.route,
            jobs.c.arm == "candidate",
            jobs.c.provider == move.candidate,
            jobs.c.state.in_([JobState.CREATING.value, JobState.QUEUED.value]),
            jobs.c.submitted_at.is_(None),
            jobs.c.provider_job_id.is_(None),
            jobs.c.cancel_requested_at.is_(None),
            sa.or_(jobs.c.raw_status.is_(None), jobs.c.raw_status == NEVER_SENT),
            lease.unleased(jobs, now),
        )
        .values(
            provider=move.control,
            target=move.target,
            arm="control",
            raw_status=None,
            next_attempt_at=now,
            updated_at=now,
            logs=sa.literal(note) + sa.func.coalesce(jobs.c.logs, ""),
        )
        .returning(jobs.c.id, jobs.c.created_at)
    )
    rows = (await conn.execute(statement)).all()
    return [r.id for r in sorted(rows, key=lambda r: (r.created_at, r.id))]
