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

from contracts.job import ACTIVE_STATES, JobState
from gateway.store.dispatching import MAYBE_SUBMITTED
from gateway.store.engine.aio import Engine
from gateway.store.reader import SqliteReads
from gateway.store.records import DeliveryStatus
from gateway.store.schema import jobs, outbox, provider_events

__all__ = ["Due"]

_ACTIVE = [s.value for s in ACTIVE_STATES]
_UNSUBMITTED = [JobState.CREATING.value, JobState.QUEUED.value]


# The queries below, written for SQLite's lock-free reader (stored times are strings in
# one format, so they compare in time order); the same as the engine's, checked at import.
_DISPATCH_SQL = (
    "SELECT min(CASE WHEN leased_until > ? THEN leased_until ELSE next_attempt_at END)"
    " FROM jobs WHERE state IN ('creating', 'queued') AND submitted_at IS NULL"
    " AND (raw_status IN ('submitting', 'resubmitting', 'unreachable')"
    " OR (cancel_requested_at IS NULL AND (deadline IS NULL OR deadline > ?)))"
)
_FETCH_SQL = (
    "SELECT min(CASE WHEN leased_until > ? THEN leased_until ELSE next_attempt_at END)"
    " FROM jobs WHERE state IN ('creating', 'queued', 'running') AND submitted_at IS NOT NULL"
)
_EVENTS_SQL = (
    "SELECT min(CASE WHEN p.leased_until > ? THEN p.leased_until ELSE ? END)"
    " FROM provider_events AS p WHERE p.processed_at IS NULL AND NOT ("
    "(p.leased_until IS NULL OR p.leased_until <= ?) AND EXISTS (SELECT 1 FROM"
    " provider_events AS e WHERE e.job_id = p.job_id AND e.id < p.id"
    " AND e.processed_at IS NULL AND e.leased_until > ?))"
)
_DELIVERY_SQL = (
    "SELECT min(CASE WHEN leased_until > ? THEN leased_until ELSE next_attempt_at END)"
    " FROM outbox WHERE status = 'pending'"
)
assert _UNSUBMITTED == ["creating", "queued"]
assert MAYBE_SUBMITTED == ("submitting", "resubmitting", "unreachable")
assert sorted(_ACTIVE) == ["creating", "queued", "running"]
assert DeliveryStatus.PENDING.value == "pending"


# The engine's statements (PostgreSQL, and SQLite when the lock-free reader cannot
# answer), built once with the time bound at execution: built on every call they were
# about a fifth of the PostgreSQL gateway's CPU profile of a `run()` (docs/benchmarks.md).
_NOW: sa.BindParameter[datetime] = sa.bindparam("due_now", type_=jobs.c.next_attempt_at.type)


def _when(next_at: Any, leased_until: Any) -> Any:
    """A row's due time: its lease's end while leased, else its own next time."""
    return sa.case((leased_until > _NOW, leased_until), else_=next_at)


def _events_query() -> sa.Select[Any]:
    """:meth:`Due.events` for the engine."""
    leased = provider_events.c.leased_until
    earlier = provider_events.alias("earlier")
    held_back = sa.and_(
        sa.or_(leased.is_(None), leased <= _NOW),
        sa.exists().where(
            earlier.c.job_id == provider_events.c.job_id,
            earlier.c.id < provider_events.c.id,
            earlier.c.processed_at.is_(None),
            earlier.c.leased_until > _NOW,
        ),
    )
    return sa.select(sa.func.min(sa.case((leased > _NOW, leased), else_=_NOW))).where(
        provider_events.c.processed_at.is_(None), ~held_back
    )


def _reap_query() -> sa.Select[Any]:
    """:meth:`Due.reap`'s five minimums (see there)."""
    unsent = sa.and_(
        jobs.c.cancel_sent_at.is_(None),
        sa.or_(jobs.c.submitted_at.is_not(None), jobs.c.raw_status.is_(None),
               jobs.c.raw_status.not_in(MAYBE_SUBMITTED)),
    )
    stopped = sa.or_(jobs.c.cancel_requested_at.is_not(None), jobs.c.deadline <= _NOW)
    held = sa.and_(jobs.c.submitted_at.is_(None), jobs.c.leased_until > _NOW)
    to_send = sa.case(
        (sa.and_(unsent, stopped, held), jobs.c.leased_until),
        (unsent, sa.func.coalesce(jobs.c.cancel_requested_at, jobs.c.deadline)),
        else_=None,
    )
    return sa.select(
        sa.func.min(to_send),
        sa.func.min(jobs.c.deadline),
        sa.func.min(jobs.c.created_at),
        sa.func.min(jobs.c.cancel_requested_at),
        sa.func.min(jobs.c.cancel_sent_at),
    ).where(jobs.c.state.in_(_ACTIVE))


_DISPATCH = sa.select(sa.func.min(_when(jobs.c.next_attempt_at, jobs.c.leased_until))).where(
    jobs.c.state.in_(_UNSUBMITTED),
    jobs.c.submitted_at.is_(None),
    sa.or_(
        jobs.c.raw_status.in_(MAYBE_SUBMITTED),  # the cancel goes via the provider
        sa.and_(
            jobs.c.cancel_requested_at.is_(None),
            sa.or_(jobs.c.deadline.is_(None), jobs.c.deadline > _NOW),
        ),
    ),
)
_FETCH = sa.select(sa.func.min(_when(jobs.c.next_attempt_at, jobs.c.leased_until))).where(
    jobs.c.state.in_(_ACTIVE), jobs.c.submitted_at.is_not(None)
)
_EVENTS = _events_query()
_DELIVERY = sa.select(
    sa.func.min(_when(outbox.c.next_attempt_at, outbox.c.leased_until))
).where(outbox.c.status == DeliveryStatus.PENDING)
_REAP = _reap_query()


class Due:
    """Next-work times of the background loops, read from the store.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    fast : bool
        Whether SQLite's lock-free reader answers (else always the engine).
    """

    def __init__(self, engine: Engine, *, fast: bool = True) -> None:
        self._engine = engine
        self._reads = SqliteReads(engine) if fast else None

    async def _min(
        self, query: sa.Select[Any], now: datetime, sql: str, params: tuple[Any, ...],
    ) -> datetime | None:
        """The one value of ``query`` at ``now``; on SQLite ``sql`` (the same query, with
        ``params``) answers it through the lock-free reader (store/reader.py) instead,
        which costs no engine round."""
        fast = self._reads.time(sql, params) if self._reads is not None else None
        if fast is not None:
            return fast[0]
        async with self._engine.read() as conn:
            return (await conn.execute(query, {"due_now": now})).scalar()

    async def dispatch(self, now: datetime) -> datetime | None:
        """The earliest time an unsubmitted job is due for dispatch: the jobs that
        :meth:`gateway.store.dispatching.DispatchClaims.claim_dispatch` takes, including
        those with a cancel request (or past their deadline) a submit may have reached.
        One no submit can have reached is the reaper's once canceled or past its
        deadline: it kept an idle dispatcher going round every ``loop_interval_s`` (an
        empty claim each time) until the reaper ended it."""
        return await self._min(_DISPATCH, now, _DISPATCH_SQL, (now, now))

    async def fetch(self, now: datetime) -> datetime | None:
        """The earliest time a submitted job is due for a poll or watchdog probe."""
        return await self._min(_FETCH, now, _FETCH_SQL, (now,))

    async def events(self, now: datetime) -> datetime | None:
        """When a stored, unapplied provider event can next be claimed. An unleased one
        that an earlier leased event of its job holds back (docs/lifecycle.md, "Order of
        a job's provider events") counts from that event's lease end, not now: it kept an
        idle processor going round every ``loop_interval_s`` through a retry's backoff."""
        return await self._min(_EVENTS, now, _EVENTS_SQL, (now, now, now, now))

    async def delivery(self, now: datetime) -> datetime | None:
        """The earliest time a pending outbound webhook is due (or its lease runs out)."""
        return await self._min(_DELIVERY, now, _DELIVERY_SQL, (now,))

    async def reap(
        self, now: datetime, *, grace_s: float, resend_s: float, lifetime_s: float
    ) -> datetime | None:
        """The earliest time the reaper may have to act on an active job: a cancel to send
        (requested, or the deadline reached, and none sent yet: the reaper's claims,
        gateway/store/claims.py), a cancel's resend time, the end of a cancel request's or
        a deadline's grace, or of the maximum lifetime.

        A cancel not sent yet is due at its request (an unsubmitted job's, once the lease
        on it ends): a round that did not take it (its row locked by a poll's claim at
        that moment, which PostgreSQL's ``SKIP LOCKED`` passes over) left the reaper
        asleep until the request's grace, up to ``loop_max_idle_s``, with the cancel
        unsent. One that no reaper can send, because a submit may have reached the
        provider without the gateway knowing its id (:data:`MAYBE_SUBMITTED`), is the
        dispatcher's, which wakes the reaper once it knows; a cancel sent is due again at
        its resend time only, so the reaper does not go round every ``loop_interval_s``
        meanwhile."""
        async with self._engine.read() as conn:
            send, deadline, oldest, requested, sent = (
                await conn.execute(_REAP, {"due_now": now})).one()
        grace = timedelta(seconds=grace_s)
        candidates = [
            send,
            deadline and deadline + grace,
            oldest and oldest + timedelta(seconds=lifetime_s),
            requested and requested + grace,
            sent and sent + timedelta(seconds=resend_s),
        ]
        return min((t for t in candidates if t is not None), default=None)
