"""The row of a prediction adopted from the legacy provider (docs/cutover-day.md).

An adopted job is stored already submitted: its provider is the legacy provider, its
``provider_job_id`` the upstream id (which is also its own id), so the poller and the
finalizer drive it like any other; the dispatcher never sends it anywhere.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from contracts.job import Job
from gateway.store.engine.aio import Engine
from gateway.store.reader import GET_JOB
from gateway.store.records import job_from_row
from gateway.store.schema import jobs

__all__ = ["insert_adopted"]


async def insert_adopted(engine: Engine, row: dict[str, object]) -> tuple[Job, bool]:
    """Insert the adopted job ``row``; ``(job, inserted)``: a row already there (adopted
    by another request or process meanwhile) is returned as it stands."""
    try:
        async with engine.begin() as conn:
            await conn.execute(jobs.insert(), [row])
        inserted = True
    except IntegrityError:
        inserted = False
    async with engine.connect() as conn:
        found = (await conn.execute(GET_JOB, {"job_id": row["id"]})).first()
    if found is None:  # the insert failed on something else than the id
        raise LookupError(f"adopted prediction {row['id']!r} was not stored")
    return job_from_row(found), inserted

