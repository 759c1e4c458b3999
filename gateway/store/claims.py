"""The job store's work queue: leases, re-checks, cancels and deadlines.

:class:`Claims` is the half of :class:`gateway.store.jobs.JobStore` that picks jobs for
the loops (dispatcher, poller, reaper) and hands them back: claims take a time-limited
lease (:mod:`gateway.store.lease`), a release says when the job is due again. The
dispatcher's claim is :class:`gateway.store.dispatching.DispatchClaims`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from contracts.job import Job, JobState
from gateway.store import applying, heartbeat, lease
from gateway.store.applying import Held
from gateway.store.dispatching import MAYBE_SUBMITTED, RESUBMITTING, SUBMITTING, DispatchClaims
from gateway.store.records import ACTIVE as _ACTIVE
from gateway.store.records import UNSUBMITTED as _UNSUBMITTED
from gateway.store.records import job_from_row as _job
from gateway.store.schema import jobs, provider_events

__all__ = ["MAYBE_SUBMITTED", "RESUBMITTING", "SUBMITTING", "Claims"]  # the first three
# are gateway.store.dispatching's, where the dispatcher's claim sets them
log = logging.getLogger(__name__)

class Claims(DispatchClaims):
    """Queue operations on ``jobs`` (a base of :class:`gateway.store.jobs.JobStore`)."""

    #: Called with a job's id when :meth:`applying` gave its apply lease back
    #: (``JobStore(on_given_back=...)``).
    _given_back: Callable[[str], None]

    async def get(self, job_id: str) -> Job:
        """The job with ``job_id`` (:meth:`gateway.store.jobs.JobStore.get`)."""
        raise NotImplementedError

    async def claim_fetch(self, limit: int, early_s: float = 0.0) -> list[Job]:
        """Lease up to ``limit`` submitted, active jobs whose next check is due, or due
        within ``early_s`` seconds (so a poller takes its jobs in groups, not one by one)."""
        now = self._clock.now()
        due = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.state.in_(_ACTIVE),
                jobs.c.submitted_at.is_not(None),
                jobs.c.next_attempt_at <= now + timedelta(seconds=early_s),
                lease.unleased(jobs, now),
            )
            .order_by(jobs.c.next_attempt_at)
            .limit(limit)
        )
        return await self._lease(due, now)

    async def _lease(self, due: sa.Select[Any], now: datetime, **values: Any) -> list[Job]:
        until = now + self._lease_length
        async with self._engine.begin() as conn:
            rows = await lease.claim(conn, jobs, due, owner=self._owner, until=until, **values)
        return [_job(row) for row in rows]

    @contextlib.asynccontextmanager
    async def applying(
        self, job_id: str, *, unless_events: bool = True, claimed: bool = True
    ) -> AsyncIterator[bool]:
        """Hold ``job_id``, leased here, under an apply lease while the body applies its
        result (a terminal one copies its outputs: 60 s a file against a 30 s lease;
        :mod:`gateway.store.applying`, docs/lifecycle.md, "Leases during an apply").
        Yields False, and nothing is held, when provider events of the job wait to be
        applied (``unless_events``: the body leaves the job to them), when the job ended
        or this process no longer holds it (not ``claimed``, the reaper's: when anyone
        holds it); else True.

        The lease is renewed every ``lease_s`` /
        :data:`~gateway.store.heartbeat.RENEWALS_PER_LEASE` seconds, so that no other
        process claims the job, fetches and downloads again meanwhile, and the job's
        provider events wait for it. A timer: a shorter apply writes nothing more. A
        lease lost anyway (the store out of reach for most of a lease) is logged once as
        ``job_lease_lost`` (:meth:`_renew`); the apply goes on (the finalizer is
        idempotent). A body that raises hands the lease back to the claim's, for the
        caller's release; one cancelled (the gateway stopping) releases the job; so does a
        take that raises or is cancelled, as it may have committed (:meth:`_give_back`)."""
        now = self._clock.now()
        held = Held(applying.new_token(), now + self._lease_length)
        owner = self._owner if claimed else None
        try:
            taken = await applying.take(
                self._engine, job_id, owner=owner, apply_owner=held.apply_owner, now=now,
                until=held.until, unless_events=unless_events,
            )
        except BaseException as exc:  # it may have committed: give back what may be held
            await self._give_back(job_id, held, owner, exc)
            raise
        if not taken:
            yield False
            return
        period_s = self._lease_length.total_seconds() / heartbeat.RENEWALS_PER_LEASE
        timer = heartbeat.Repeat(
            lambda: self._renew(job_id, held), period_s, "job_lease_renewal_failed"
        )
        try:
            yield True
        except BaseException as exc:
            await timer.stop()
            await self._give_back(job_id, held, owner, exc)
            raise
        finally:
            await timer.stop()

    async def _give_back(
        self, job_id: str, held: Held, owner: str | None, exc: BaseException
    ) -> None:
        """:meth:`applying`'s lease, held or maybe held, given back after ``exc``: to the
        claim's ``owner`` for an Exception, released for a cancel (the gateway stopping:
        nobody's, so no event nor poll waits for it); guarded by the apply's own token.
        Given back, the job's waiting events are due and this process's event processor
        is woken (``on_given_back``); other processes' retry at their quarter lease."""
        back = owner if isinstance(exc, Exception) else None
        with contextlib.suppress(SQLAlchemyError):  # else the lease runs out
            if await applying.give_back(self._engine, job_id, held, back, self._clock.now()):
                self._given_back(job_id)

    async def _renew(self, job_id: str, held: Held) -> None:
        """One renewal of :meth:`applying`'s lease. Found released while still held (the
        apply's own finish, just before its body returned: nobody else may take a held
        lease), it says nothing; found taken, or released after it ran out (another
        process may have finished the job), it logs ``job_lease_lost`` once, naming the
        holder (``held_by``: a lease owner, docs/lifecycle.md "Lease owners")."""
        if held.gone:
            return  # nothing left to renew
        now = self._clock.now()
        until = now + self._lease_length
        holder = await applying.renew(self._engine, job_id, held.apply_owner, until)
        if holder == held.apply_owner:
            held.until = until
            return
        held.gone = True
        if holder is not None or now >= held.until:
            log.warning("job_lease_lost", extra={"job_id": job_id, "held_by": holder})

    async def postpone_check(self, job_id: str, until: datetime) -> None:
        """Push a submitted job's next poll or watchdog probe back to ``until``.

        Called when the provider has just spoken about the job (a webhook arrived), so
        the watchdog does not probe a job whose events are still being applied.
        """
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(
                    jobs.c.id == job_id,
                    jobs.c.state.in_(_ACTIVE),
                    jobs.c.submitted_at.is_not(None),
                    jobs.c.next_attempt_at < until,
                )
                .values(next_attempt_at=until)
            )

    async def check_now(self, job_id: str) -> bool:
        """Make a submitted, active job's next poll due now (an unsigned webhook's poke);
        False when the job is not (or no longer) active and submitted. On the lifecycle's
        connections (a provider webhook's: never behind polling GETs)."""
        async with self._engine.begin(lifecycle=True) as conn:
            done = await conn.execute(
                jobs.update()
                .where(
                    jobs.c.id == job_id,
                    jobs.c.state.in_(_ACTIVE),
                    jobs.c.submitted_at.is_not(None),
                )
                .values(next_attempt_at=self._clock.now())
            )
        return bool(done.rowcount)

    async def mark_lost(self, job_id: str) -> datetime:
        """Record when the provider was first found not to know the job; return that time."""
        now = self._clock.now()
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.state.in_(_ACTIVE), jobs.c.lost_at.is_(None))
                .values(lost_at=now, updated_at=now)
            )
            return (
                await conn.execute(sa.select(jobs.c.lost_at).where(jobs.c.id == job_id))
            ).scalar_one()

    async def mark_found(self, job_id: str) -> None:
        """Forget that the provider was found not to know the job: a later fetch found it
        (another process holds an OpenAI-compatible call; Cog's probe erred). The next
        "lost" starts the grace afresh, and the job holds its slot again."""
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.state.in_(_ACTIVE), jobs.c.lost_at.is_not(None))
                .values(lost_at=None, updated_at=self._clock.now())
            )

    async def has_unprocessed_events(self, job_id: str) -> bool:
        """Whether provider events for ``job_id`` are stored but not yet applied."""
        query = sa.select(provider_events.c.id).where(
            provider_events.c.job_id == job_id, provider_events.c.processed_at.is_(None)
        )
        async with self._engine.read() as conn:
            return (await conn.execute(query.limit(1))).first() is not None

    async def count_in_flight(self, provider: str) -> int:
        """Jobs submitted to ``provider`` and not yet terminal."""
        async with self._engine.connect() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count())
                        .select_from(jobs)
                        .where(
                            jobs.c.provider == provider,
                            jobs.c.state.in_(_ACTIVE),
                            jobs.c.submitted_at.is_not(None),
                        )
                    )
                ).scalar_one()
            )

    async def release(self, job_id: str, *, next_attempt_at: datetime | None) -> None:
        """Drop this process's lease and set when the job is due again."""
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(
                    jobs.c.id == job_id,
                    jobs.c.state.in_(_ACTIVE),
                    jobs.c.lease_owner == self._owner,
                )
                .values(
                    lease_owner=None,
                    leased_until=None,
                    next_attempt_at=next_attempt_at,
                    updated_at=self._clock.now(),
                )
            )

    async def release_many(self, due: Mapping[str, datetime | None]) -> None:
        """:meth:`release` of several jobs (id -> due again) in one write."""
        await lease.release_rows(self, jobs, due, states=_ACTIVE)

    async def defer(self, job_id: str, *, next_attempt_at: datetime, raw_status: str) -> None:
        """The provider was busy: keep the job ``queued`` and try again later."""
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.state.in_(_UNSUBMITTED))
                .values(
                    state=JobState.QUEUED.value,
                    raw_status=raw_status,
                    attempts=jobs.c.attempts + 1,
                    next_attempt_at=next_attempt_at,
                    lease_owner=None,
                    leased_until=None,
                    updated_at=self._clock.now(),
                )
            )

    async def _select(self, query: sa.Select[Any]) -> list[Job]:
        async with self._engine.read() as conn:
            return [_job(row) for row in await conn.execute(query)]

    # --- cancel and deadlines -------------------------------------------------------

    async def request_cancel(self, job_id: str) -> Job:
        """Mark a cancel request (idempotent) on the job and its shadows (docs/shadow.md);
        returns the job as it stands. A job an earlier submit may have reached
        (:data:`MAYBE_SUBMITTED`) is due for dispatch now: its resubmit is how the cancel
        reaches the provider (or finds nothing there to cancel), not in up to
        ``REFUSED_RESUBMIT_WAIT_S``."""
        now = self._clock.now()
        maybe = sa.and_(jobs.c.submitted_at.is_(None), jobs.c.raw_status.in_(MAYBE_SUBMITTED))
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(
                    sa.or_(jobs.c.id == job_id, jobs.c.shadow_of == job_id),
                    jobs.c.state.in_(_ACTIVE),
                    jobs.c.cancel_requested_at.is_(None),
                )
                .values(
                    cancel_requested_at=now, updated_at=now,
                    next_attempt_at=sa.case((maybe, now), else_=jobs.c.next_attempt_at),
                )
            )
        return await self.get(job_id)

    async def mark_cancel_sent(self, job_id: str) -> None:
        """Record that the provider was asked to cancel (active jobs only)."""
        now = self._clock.now()
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.state.in_(_ACTIVE))
                .values(cancel_sent_at=now, updated_at=now)
            )

    async def unsubmitted_to_cancel(self, limit: int) -> list[Job]:
        """Unsubmitted jobs with a cancel request or a passed deadline (not leased), that
        the provider cannot have (:data:`MAYBE_SUBMITTED`)."""
        now = self._clock.now()
        query = (
            sa.select(jobs)
            .where(
                jobs.c.state.in_(_UNSUBMITTED),
                jobs.c.submitted_at.is_(None),
                sa.or_(jobs.c.raw_status.is_(None), jobs.c.raw_status.not_in(MAYBE_SUBMITTED)),
                sa.or_(jobs.c.cancel_requested_at.is_not(None), jobs.c.deadline <= now),
                lease.unleased(jobs, now),
            )
            .limit(limit)
        )
        return await self._select(query)

    async def claim_cancels(self, resend_before: datetime, limit: int) -> list[Job]:
        """Claim submitted active jobs that need a provider cancel (again).

        A cancel is due when one was requested or the deadline passed, and none was sent
        yet or the last one went out before ``resend_before`` without a terminal event
        following (a provider may acknowledge a cancel and still miss it: docs/cog.md
        §1.7). The claim marks the cancel sent (``cancel_sent_at``) before it is sent:
        that mark is the cancel's lease, so however many processes run, one cancel goes
        out per job per resend interval.
        """
        now = self._clock.now()
        due = sa.and_(
            jobs.c.state.in_(_ACTIVE),
            jobs.c.submitted_at.is_not(None),
            sa.or_(jobs.c.cancel_requested_at.is_not(None), jobs.c.deadline <= now),
            sa.or_(jobs.c.cancel_sent_at.is_(None), jobs.c.cancel_sent_at <= resend_before),
        )
        async with self._engine.begin() as conn:
            query = sa.select(jobs.c.id).where(due).limit(limit)
            ids = list((await conn.execute(query.with_for_update(skip_locked=True))).scalars())
            if not ids:
                return []
            rows = await conn.execute(
                jobs.update()
                .where(jobs.c.id.in_(ids), due)
                .values(cancel_sent_at=now, updated_at=now)
                .returning(*jobs.c)
            )
            return [_job(row) for row in rows]

    async def overdue(
        self, *, cancel_before: datetime, created_before: datetime, limit: int
    ) -> list[Job]:
        """Active jobs the gateway must end itself.

        ``cancel_before``: a cancel was requested, or the deadline passed, before this
        time, and the job was not submitted after it (the provider gets the whole grace
        to act on the cancel), and no terminal event followed. ``created_before``: a job
        without a deadline of its own created before this (the gateway's maximum job
        lifetime). A job the
        provider may have without the gateway knowing its id (:data:`MAYBE_SUBMITTED`)
        is left to the dispatcher, whose submit learns the id so the cancel reaches the
        provider; only the maximum lifetime ends it here.
        """
        maybe = sa.and_(jobs.c.submitted_at.is_(None), jobs.c.raw_status.in_(MAYBE_SUBMITTED))
        known = sa.or_(
            jobs.c.submitted_at.is_not(None), jobs.c.raw_status.is_(None),
            jobs.c.raw_status.not_in(MAYBE_SUBMITTED),
        )
        query = (
            sa.select(jobs)
            .where(
                jobs.c.state.in_(_ACTIVE),
                sa.or_(
                    sa.and_(known, sa.or_(
                        jobs.c.cancel_requested_at <= cancel_before,
                        jobs.c.deadline <= cancel_before,
                    ), sa.or_(jobs.c.submitted_at.is_(None),
                              jobs.c.submitted_at <= cancel_before)),
                    sa.and_(
                        sa.or_(jobs.c.deadline.is_(None), maybe),
                        jobs.c.created_at <= created_before,
                    ),
                ),
            )
            .limit(limit)
        )
        return await self._select(query)
