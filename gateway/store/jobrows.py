"""The ``jobs`` columns a :class:`~contracts.job.Job` has, and GET's batched reads of them
on PostgreSQL (:class:`gateway.store.reader.JobReader`, docs/lifecycle.md, "Reads of a
prediction").

On PostgreSQL an in-flight GET reads a job's row version, tenant and arm, and the whole
row when the version changed, each batched with the other GETs waiting, straight through
asyncpg (:mod:`gateway.store.engine.pgreads`): the statements are here, and
:func:`job_and_version` turns their rows (or the engine's) into jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

from contracts.job import Job
from gateway.store.schema import UTCDateTime, jobs

__all__ = ["COLUMNS", "CURRENT_SQL", "NAMES", "VERSIONS_SQL", "job_and_version", "pg_job"]

COLUMNS = [c for c in jobs.c if c.name in Job.model_fields]
"""The columns of a :class:`~contracts.job.Job`, in table order (``id`` first)."""
NAMES = [c.name for c in COLUMNS]
VERSIONS_SQL = ("SELECT id, row_version, updated_at, tenant, arm FROM jobs "
                "WHERE id = ANY($1::text[])")
"""``$1`` the ids (``text[]``): ``(id, row_version, updated_at, tenant, arm)`` of each."""
CURRENT_SQL = (f"SELECT {', '.join(NAMES)}, row_version, updated_at FROM jobs "  # noqa: S608
               "WHERE id = ANY($1::text[])")
"""``$1`` the ids: each row whole with its version (rows for :func:`job_and_version`)."""
# asyncpg's rows: JSON decoded by the codec SQLAlchemy's dialect sets on every connection;
# the timestamps made UTC as UTCDateTime's result processing makes them
_TIMES = [i for i, c in enumerate(COLUMNS) if isinstance(c.type, UTCDateTime)]


def job_and_version(row: Sequence[Any]) -> tuple[Job, tuple[int, Any]]:
    """A row of :data:`CURRENT_SQL` (from asyncpg) or of the same columns from the engine
    as ``(job, (row_version, updated_at))``."""
    *values, version, updated = row
    return pg_job(values), (version, updated)


def pg_job(row: Sequence[Any]) -> Job:
    """A row of :data:`COLUMNS` (from asyncpg, or the engine) as a job."""
    values = list(row)
    for index in _TIMES:  # as UTCDateTime.process_result_value
        at = values[index]
        if at is not None:
            values[index] = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return Job.model_validate(dict(zip(NAMES, values, strict=True)))
