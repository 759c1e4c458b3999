"""The row of a prediction adopted from the legacy provider (docs/cutover-day.md).

An adopted job is stored already submitted: its provider is the legacy provider, its
``provider_job_id`` the upstream id (which is also its own id), so the poller and the
finalizer drive it like any other; the dispatcher never sends it anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from contracts.job import Job
from gateway.store.engine.aio import Engine
from gateway.store.reader import GET_JOB
from gateway.store.records import AssetRecord, job_from_row
from gateway.store.schema import assets, jobs

__all__ = ["existing_ids", "insert_adopted"]


async def insert_adopted(
    engine: Engine, row: dict[str, object], records: Sequence[AssetRecord] = ()
) -> tuple[Job, bool]:
    """Insert the adopted job ``row`` (and the owned files of its output, ``records``, in
    the same transaction); ``(job, inserted)``: a row already there (adopted by another
    request or process meanwhile, imported before) is returned as it stands."""
    now = row["updated_at"]
    try:
        async with engine.begin() as conn:
            await conn.execute(jobs.insert(), [row])
            if records:
                await conn.execute(assets.insert(), [
                    {**r.__dict__, "job_id": row["id"], "created_at": now} for r in records])
        inserted = True
    except IntegrityError:
        inserted = False
    async with engine.connect() as conn:
        found = (await conn.execute(GET_JOB, {"job_id": row["id"]})).first()
    if found is None:  # the insert failed on something else than the id
        raise LookupError(f"adopted prediction {row['id']!r} was not stored")
    return job_from_row(found), inserted



async def existing_ids(engine: Engine, job_ids: Sequence[str]) -> set[str]:
    """Which of ``job_ids`` the store holds (one query)."""
    if not job_ids:
        return set()
    async with engine.connect() as conn:
        found = await conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(list(job_ids))))
    return {row[0] for row in found}
