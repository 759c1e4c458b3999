"""A job's apply lease: the lease a loop holds on a job while it applies the job's result.

docs/lifecycle.md, "Leases during an apply". The poller, finding a job finished, the
dispatcher, whose submit answered with the result, and the reaper, whose last ask found
the job finished, apply it (copying its outputs, which may outlast a lease) under a
lease of its own: ``lease_owner`` is a token made for that
apply (:data:`PREFIX` and 24 hex digits), ``leased_until`` renewed every quarter of
``lease_s`` while the apply lasts (:meth:`gateway.store.claims.Claims.applying`). The
token tells the provider-event processor, in the job row it reads for every event
anyway, that a result is being applied there: the event waits until that lease is given
up or runs out (:meth:`held_until`, :class:`gateway.intake.EventProcessor`), and then
finds the job finished, without a second copy. An apply that fails or is cancelled
gives the lease back (:func:`give_back`): the events put back to wait for it are due at
once, and :meth:`gateway.store.claims.Claims.applying` wakes this process's event
processor; another process's retries them at its quarter lease.

The lease is taken from the claim's (``lease_owner`` the process; the reaper, which claims
nothing, takes it from nobody's) in one statement, only
while no provider event of the job waits to be applied: either the apply leaves the job
to its events, or a webhook stored meanwhile finds the apply lease. On PostgreSQL the
job's row is locked first: an event being stored for the job holds a key-share lock on
it (the foreign key) until it commits, so the statement sees that event, or the event
commits after the lease and the processor, reading the job after that, finds it.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import datetime

import sqlalchemy as sa

from gateway.store.engine.aio import Engine
from gateway.store.lease import unleased
from gateway.store.records import ACTIVE
from gateway.store.schema import jobs, provider_events

__all__ = ["PREFIX", "Held", "give_back", "held_until", "new_token", "renew", "take"]

PREFIX = "+apply:"  # lease_owner of a job whose result is being applied; no host name
# starts with "+" (letters, digits, hyphens), so no process's owner (lease.owner_id) does


def new_token() -> str:
    """The ``lease_owner`` of one apply (unique, well within the column's 64)."""
    return PREFIX + secrets.token_hex(12)


def held_until(lease_owner: str | None, leased_until: datetime | None, now: datetime
               ) -> datetime | None:
    """The end of the apply lease a job's row holds (``lease_owner``, ``leased_until``),
    when one is held at ``now``; None when no result is being applied (or its holder
    stopped renewing it and the lease ran out)."""
    if lease_owner is None or leased_until is None or not lease_owner.startswith(PREFIX):
        return None
    return leased_until if leased_until >= now else None


async def take(
    engine: Engine, job_id: str, *, owner: str | None, apply_owner: str, now: datetime,
    until: datetime, unless_events: bool,
) -> bool:
    """Turn ``owner``'s lease of the active job ``job_id`` (with ``owner`` None: no lease,
    the reaper's) into the apply lease ``apply_owner`` until ``until``; with
    ``unless_events``, only while none of its provider events waits to be applied. False
    when it was not taken (events wait, the job ended, or ``owner`` does not hold it, or
    another does)."""
    held = jobs.c.lease_owner == owner if owner is not None else unleased(jobs, now)
    where = [jobs.c.id == job_id, held, jobs.c.state.in_(ACTIVE)]
    if unless_events:
        where.append(~sa.exists().where(
            provider_events.c.job_id == job_id, provider_events.c.processed_at.is_(None)
        ))
    async with engine.begin() as conn:
        # The row lock first (PostgreSQL; SQLite's writers are serialised): module docstring.
        await conn.execute(sa.select(jobs.c.id).where(jobs.c.id == job_id).with_for_update())
        done = await conn.execute(
            jobs.update().where(*where).values(lease_owner=apply_owner, leased_until=until)
        )
    return bool(done.rowcount)


@dataclasses.dataclass
class Held:
    """One apply lease as its holder knows it: its ``apply_owner``, ``until`` when the last
    write of it (the take, a renewal) holds it, and whether a renewal found it ``gone``."""

    apply_owner: str
    until: datetime
    gone: bool = False


async def renew(engine: Engine, job_id: str, apply_owner: str, until: datetime) -> str | None:
    """Extend the apply lease ``apply_owner`` of ``job_id`` to ``until``; the job's
    ``lease_owner`` after that: ``apply_owner`` when renewed, else None when the lease was
    released (the job finished: a terminal job is claimed by none) or another holder's."""
    async with engine.begin() as conn:
        done = await conn.execute(
            jobs.update()
            .where(jobs.c.id == job_id, jobs.c.lease_owner == apply_owner)
            .values(leased_until=until)
        )
        if done.rowcount:
            return apply_owner
        now_held = sa.select(jobs.c.lease_owner).where(jobs.c.id == job_id)
        return (await conn.execute(now_held)).scalar()


async def give_back(
    engine: Engine, job_id: str, held: Held, owner: str | None, now: datetime
) -> bool:
    """An apply that failed or was cancelled, or whose take may have committed: the lease
    is ``owner``'s claim again (so the loop's release of the job, with its retry's backoff,
    applies; None: no lease), only while the apply ``held`` holds it (never another's), and
    events no longer wait for it: those of the job put back to wait for it (their retry at
    or before ``held.until``, :class:`gateway.intake.EventProcessor`) are due at once.
    True when the lease was given back (the caller wakes the event processor)."""
    back = {"lease_owner": owner} if owner is not None else {
        "lease_owner": None, "leased_until": None
    }
    async with engine.begin() as conn:
        done = await conn.execute(
            jobs.update()
            .where(jobs.c.id == job_id, jobs.c.lease_owner == held.apply_owner)
            .values(**back)
        )
        if not done.rowcount:
            return False
        waited = sa.and_(  # put back until this lease's end or sooner, and not yet due
            provider_events.c.job_id == job_id, provider_events.c.processed_at.is_(None),
            provider_events.c.lease_owner.is_(None),
            provider_events.c.leased_until.between(now, held.until),
        )
        await conn.execute(provider_events.update().where(waited).values(leased_until=None))
    return True
