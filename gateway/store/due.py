"""When each background loop next has work, so that an idle loop sleeps until then.

A loop with nothing to do asks here when its earliest piece of work falls due (a job's
``next_attempt_at``, a lease running out, a deadline, a webhook retry) and sleeps until
then or until woken (:class:`gateway.notify.Notifier`), instead of querying the store
every ``loop_interval_s``: an idle gateway costs nothing (docs/benchmarks.md). Each
answer is one aggregate query; None means "nothing scheduled" (the loop then sleeps its
longest idle interval, which also bounds how late it notices work that another process
left behind without waking anyone).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from contracts.job import ACTIVE_STATES, JobState
from gateway.store.dispatching import MAYBE_SUBMITTED
from gateway.store.outbox import DeliveryStatus
from gateway.store.schema import jobs, outbox, provider_events

__all__ = ["Due"]

_ACTIVE = [s.value for s in ACTIVE_STATES]
_UNSUBMITTED = [JobState.CREATING.value, JobState.QUEUED.value]


def _when(next_at: Any, leased_until: Any, now: datetime) -> Any:
    """A row's due time: its lease's end while leased, else its own next time."""
    return sa.case((leased_until > now, leased_until), else_=next_at)


class Due:
    """Next-work times of the background loops, read from the store.

    Parameters
    ----------
    engine : AsyncEngine
        The process's engine (owned by the caller).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def _min(self, query: sa.Select[Any]) -> datetime | None:
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def dispatch(self, now: datetime) -> datetime | None:
        """The earliest time an unsubmitted job is due for dispatch: the jobs that
        :meth:`gateway.store.dispatching.DispatchClaims.claim_dispatch` takes, including
        those with a cancel request (or past their deadline) a submit may have reached."""
        when = _when(jobs.c.next_attempt_at, jobs.c.leased_until, now)
        return await self._min(
            sa.select(sa.func.min(when)).where(
                jobs.c.state.in_(_UNSUBMITTED),
                jobs.c.submitted_at.is_(None),
                sa.or_(
                    jobs.c.raw_status.in_(MAYBE_SUBMITTED),  # the cancel goes via the provider
                    jobs.c.cancel_requested_at.is_(None),
                ),
            )
        )

    async def fetch(self, now: datetime) -> datetime | None:
        """The earliest time a submitted job is due for a poll or watchdog probe."""
        when = _when(jobs.c.next_attempt_at, jobs.c.leased_until, now)
        return await self._min(
            sa.select(sa.func.min(when)).where(
                jobs.c.state.in_(_ACTIVE), jobs.c.submitted_at.is_not(None)
            )
        )

    async def events(self, now: datetime) -> datetime | None:
        """When a stored, unapplied provider event can next be claimed."""
        leased = provider_events.c.leased_until
        when = sa.case((leased > now, leased), else_=now)
        return await self._min(
            sa.select(sa.func.min(when)).where(provider_events.c.processed_at.is_(None))
        )

    async def delivery(self, now: datetime) -> datetime | None:
        """The earliest time a pending outbound webhook is due (or its lease runs out)."""
        when = _when(outbox.c.next_attempt_at, outbox.c.leased_until, now)
        pending = outbox.c.status == DeliveryStatus.PENDING
        return await self._min(sa.select(sa.func.min(when)).where(pending))

    async def reap(
        self, now: datetime, *, grace_s: float, resend_s: float, lifetime_s: float
    ) -> datetime | None:
        """The earliest time the reaper may have to act on an active job: a deadline, the
        end of the maximum lifetime, a cancel request's grace or a cancel's resend time."""
        del now  # every candidate is a stored time
        query = sa.select(
            sa.func.min(jobs.c.deadline),
            sa.func.min(jobs.c.created_at),
            sa.func.min(jobs.c.cancel_requested_at),
            sa.func.min(jobs.c.cancel_sent_at),
        ).where(jobs.c.state.in_(_ACTIVE))
        async with self._engine.connect() as conn:
            deadline, oldest, requested, sent = (await conn.execute(query)).one()
        candidates = [
            deadline,
            oldest and oldest + timedelta(seconds=lifetime_s),
            requested and requested + timedelta(seconds=grace_s),
            sent and sent + timedelta(seconds=resend_s),
        ]
        return min((t for t in candidates if t is not None), default=None)
