"""The job store: every read and guarded write of the ``jobs`` table.

Transitions are guarded SQL (STYLE.md rule 11): an update names the states it may move
from, and no row updated means "someone else already moved it". Outbox rows caused by a
transition are written in the same transaction (see :mod:`gateway.store.outbox`). Claims take a
time-limited lease; on PostgreSQL the candidate rows are locked with
``FOR UPDATE SKIP LOCKED``, on SQLite ``BEGIN IMMEDIATE`` serialises writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contracts.errors import Conflict, NotFound
from contracts.job import ACTIVE_STATES, TERMINAL_STATES, Job, JobState, can_transition
from gateway.clock import Clock, utcnow
from gateway.store import lease, outbox
from gateway.store.schema import assets, jobs, provider_events

__all__ = ["AssetRecord", "JobStore", "NewJob", "Outcome", "Progress", "ValueRefused"]

_ACTIVE = [s.value for s in ACTIVE_STATES]
_UNSUBMITTED = [JobState.CREATING.value, JobState.QUEUED.value]
_TERMINAL = [s.value for s in TERMINAL_STATES]
_BATCH = 500


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
    webhook: str | None = None
    webhook_events_filter: list[str] | None = None
    deadline: datetime | None = None
    stream: bool = False
    idempotency_key: str | None = None
    request_hash: str | None = None
    created_at: datetime | None = None


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


class ValueRefused(Exception):
    """The database refused to store a value.

    ``error`` names the store's error class, ``cause`` the database driver's.
    """

    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error} ({cause})")
        self.error = error
        self.cause = cause


def _text(value: str | None) -> str | None:
    """Provider text made storable everywhere: PostgreSQL text cannot hold NUL."""
    return None if value is None else value.replace("\x00", "\ufffd")


def _job(row: sa.Row[Any]) -> Job:
    return Job.model_validate(dict(row._mapping))


class JobStore:
    """Reads and guarded writes of jobs.

    Parameters
    ----------
    engine : AsyncEngine
        The process's engine (owned by the caller).
    planner : outbox.Planner
        Decides which outbound webhook events a transition causes.
    owner : str
        This process's lease owner id.
    lease_s : float
        How long a claim holds a job before another process may take it, in seconds.
    clock : Clock
        Injected time source.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        planner: outbox.Planner,
        owner: str,
        lease_s: float = 30.0,
        clock: Clock = utcnow,
    ) -> None:
        self._engine = engine
        self._planner = planner
        self._owner = owner
        self._lease_duration = timedelta(seconds=lease_s)
        self._clock = clock

    @property
    def engine(self) -> AsyncEngine:
        """The engine, for tests that inspect or rewrite rows (the gateway never asks)."""
        return self._engine

    async def ping(self) -> None:
        """Run ``SELECT 1``; raises whatever the database raises when it cannot answer."""
        async with self._engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    # --- create and read -------------------------------------------------------------

    async def create(self, new: NewJob) -> tuple[Job, bool]:
        """Insert a job in state ``creating``; return ``(job, created)``.

        With an idempotency key already used for the same request, the stored job comes
        back with ``created=False`` (DESIGN invariant 1).

        Raises
        ------
        Conflict
            The key was used for a different request body.
        """
        now = new.created_at or self._clock()
        values = {
            **new.__dict__,
            "state": JobState.CREATING.value,
            "raw_status": None,
            "created_at": now,
            "updated_at": now,
            "next_attempt_at": now,
            "attempts": 0,
        }
        try:
            async with self._engine.begin() as conn:
                await conn.execute(jobs.insert().values(**values))
        except IntegrityError as exc:
            if new.idempotency_key is None:
                raise
            existing = await self._by_idempotency_key(new.idempotency_key)
            if existing is None:
                raise
            if existing[1] != new.request_hash:
                raise Conflict(
                    f"Idempotency-Key {new.idempotency_key!r} was already used with a "
                    "different request; use a new key for a new prediction"
                ) from exc
            return existing[0], False
        return await self.get(new.id), True

    async def find_idempotent(self, key: str, request_hash: str) -> Job | None:
        """The job created earlier under ``key`` for the same request, if any.

        Raises ``Conflict`` when the key belongs to a different request.
        """
        existing = await self._by_idempotency_key(key)
        if existing is None:
            return None
        if existing[1] != request_hash:
            raise Conflict(
                f"Idempotency-Key {key!r} was already used with a different request; "
                "use a new key for a new prediction"
            )
        return existing[0]

    async def _by_idempotency_key(self, key: str) -> tuple[Job, str | None] | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(sa.select(jobs).where(jobs.c.idempotency_key == key))
            ).first()
        return None if row is None else (_job(row), row.request_hash)

    async def get(self, job_id: str) -> Job:
        """The job with ``job_id``; ``NotFound`` if there is none."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(jobs).where(jobs.c.id == job_id))).first()
        if row is None:
            raise NotFound(f"prediction {job_id!r} does not exist")
        return _job(row)

    async def callback_token(self, job_id: str) -> tuple[str, str] | None:
        """``(provider, callback_token)`` of a job, or None if unknown."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(jobs.c.provider, jobs.c.callback_token).where(jobs.c.id == job_id)
                )
            ).first()
        return None if row is None else (row.provider, row.callback_token)

    async def page(
        self,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        after: tuple[datetime, str] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs, newest first.

        ``before``: only jobs strictly older than this ``(created_at, id)`` position;
        ``after``: only jobs strictly newer, the ``limit`` closest to it (still returned
        newest first).
        """
        if after is not None:
            at, job_id = after
            query = (
                sa.select(jobs)
                .where(
                    sa.or_(
                        jobs.c.created_at > at,
                        sa.and_(jobs.c.created_at == at, jobs.c.id > job_id),
                    )
                )
                .order_by(jobs.c.created_at, jobs.c.id)
                .limit(limit)
            )
        else:
            query = (
                sa.select(jobs).order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
            )
        if before is not None:
            at, job_id = before
            query = query.where(
                sa.or_(
                    jobs.c.created_at < at, sa.and_(jobs.c.created_at == at, jobs.c.id < job_id)
                )
            )
        if created_after is not None:
            query = query.where(jobs.c.created_at > created_after)
        if created_before is not None:
            query = query.where(jobs.c.created_at < created_before)
        async with self._engine.connect() as conn:
            found = [_job(row) for row in await conn.execute(query)]
        return found[::-1] if after is not None else found

    async def terminal_among(self, job_ids: Sequence[str]) -> list[str]:
        """Which of ``job_ids`` are in a terminal state (asked in batches of 500)."""
        found: list[str] = []
        if not job_ids:
            return found
        async with self._engine.connect() as conn:
            for start in range(0, len(job_ids), _BATCH):
                chunk = job_ids[start : start + _BATCH]
                query = sa.select(jobs.c.id).where(
                    jobs.c.id.in_(chunk), jobs.c.state.in_(_TERMINAL)
                )
                found.extend((await conn.execute(query)).scalars())
        return found

    async def asset_content_type(self, key: str) -> str | None:
        """The recorded content type of the owned file ``key``, if it is known."""
        async with self._engine.connect() as conn:
            return (
                await conn.execute(sa.select(assets.c.content_type).where(assets.c.key == key))
            ).scalar()

    # --- leases -----------------------------------------------------------------------

    async def claim_dispatch(self, provider: str, limit: int) -> list[Job]:
        """Lease up to ``limit`` unsubmitted, due jobs of ``provider``, oldest first."""
        if limit <= 0:
            return []
        now = self._clock()
        due = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.provider == provider,
                jobs.c.state.in_(_UNSUBMITTED),
                jobs.c.submitted_at.is_(None),
                jobs.c.cancel_requested_at.is_(None),
                sa.or_(jobs.c.deadline.is_(None), jobs.c.deadline > now),
                sa.or_(jobs.c.next_attempt_at.is_(None), jobs.c.next_attempt_at <= now),
                lease.unleased(jobs, now),
            )
            .order_by(jobs.c.created_at, jobs.c.id)
            .limit(limit)
        )
        return await self._lease(due, now)

    async def claim_fetch(self, limit: int) -> list[Job]:
        """Lease up to ``limit`` submitted, active jobs whose next check is due."""
        now = self._clock()
        due = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.state.in_(_ACTIVE),
                jobs.c.submitted_at.is_not(None),
                jobs.c.next_attempt_at <= now,
                lease.unleased(jobs, now),
            )
            .order_by(jobs.c.next_attempt_at)
            .limit(limit)
        )
        return await self._lease(due, now)

    async def _lease(self, due: sa.Select[Any], now: datetime) -> list[Job]:
        until = now + self._lease_duration
        async with self._engine.begin() as conn:
            rows = await lease.claim(conn, jobs, due, owner=self._owner, until=until)
        return [_job(row) for row in rows]

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

    async def mark_lost(self, job_id: str) -> datetime:
        """Record when the provider was first found not to know the job; return that time."""
        now = self._clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.lost_at.is_(None))
                .values(lost_at=now, updated_at=now)
            )
            return (
                await conn.execute(sa.select(jobs.c.lost_at).where(jobs.c.id == job_id))
            ).scalar_one()

    async def has_unprocessed_events(self, job_id: str) -> bool:
        """Whether provider events for ``job_id`` are stored but not yet applied."""
        query = sa.select(provider_events.c.id).where(
            provider_events.c.job_id == job_id, provider_events.c.processed_at.is_(None)
        )
        async with self._engine.connect() as conn:
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
                .where(jobs.c.id == job_id, jobs.c.lease_owner == self._owner)
                .values(
                    lease_owner=None,
                    leased_until=None,
                    next_attempt_at=next_attempt_at,
                    updated_at=self._clock(),
                )
            )

    # --- dispatch outcomes ----------------------------------------------------------

    async def mark_submitted(
        self, job_id: str, provider_job_id: str, progress: Progress, next_check_at: datetime
    ) -> Job | None:
        """Record that the provider accepted the job; apply its first snapshot."""
        now = self._clock()
        return await self._transition(
            job_id,
            progress,
            extra={
                "provider_job_id": provider_job_id,
                "submitted_at": now,
                "next_attempt_at": next_check_at,
                "lease_owner": None,
                "leased_until": None,
            },
            allowed=_ACTIVE,
            force=True,
        )

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
                    updated_at=self._clock(),
                )
            )

    async def apply_progress(self, job_id: str, progress: Progress) -> Job | None:
        """Record a non-terminal snapshot (forward state, output, logs) and its events."""
        return await self._transition(job_id, progress, extra={}, allowed=_ACTIVE)

    async def _transition(
        self,
        job_id: str,
        progress: Progress,
        *,
        extra: dict[str, Any],
        allowed: list[str],
        force: bool = False,
    ) -> Job | None:
        now = self._clock()
        async with self._engine.begin() as conn:
            old = await self._locked(conn, job_id)
            if old is None or old.state.value not in allowed:
                return None
            values: dict[str, Any] = {"raw_status": progress.raw_status, "updated_at": now}
            values.update(extra)
            if can_transition(old.state, progress.state):
                values["state"] = progress.state.value
                if progress.state is JobState.RUNNING and old.started_at is None:
                    values["started_at"] = now
            elif not force and progress.output == old.output and progress.logs == old.logs:
                await conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))
                return old
            if progress.output is not None:
                values["output"] = progress.output
            if progress.logs is not None:
                values["logs"] = _text(progress.logs)
            row = (
                await conn.execute(
                    jobs.update()
                    .where(jobs.c.id == job_id, jobs.c.state.in_(allowed))
                    .values(**values)
                    .returning(*jobs.c)
                )
            ).first()
            if row is None:
                return None
            new = _job(row)
            await self._planner.write(conn, old, new, now)
            return new

    async def _select(self, query: sa.Select[Any]) -> list[Job]:
        async with self._engine.connect() as conn:
            return [_job(row) for row in await conn.execute(query)]

    async def _locked(self, conn: AsyncConnection, job_id: str) -> Job | None:
        row = (
            await conn.execute(sa.select(jobs).where(jobs.c.id == job_id).with_for_update())
        ).first()
        return None if row is None else _job(row)

    # --- the terminal write ------------------------------------------------------------

    async def finish(self, job_id: str, outcome: Outcome) -> Job | None:
        """Record the terminal state, its assets and its ``completed`` event, atomically.

        Returns the finished job, or None when the job was already terminal (or does
        not exist): a second call is a no-op (DESIGN invariant 3).

        Raises
        ------
        ValueRefused
            The database raised a DBAPI error while recording the outcome.
        """
        try:
            return await self._finish(job_id, outcome)
        except DBAPIError as exc:
            raise ValueRefused(type(exc).__name__, type(exc.orig).__name__) from exc

    async def _finish(self, job_id: str, outcome: Outcome) -> Job | None:
        now = self._clock()
        async with self._engine.begin() as conn:
            old = await self._locked(conn, job_id)
            if old is None or old.state.terminal:
                return None
            values: dict[str, Any] = {
                "state": outcome.state.value,
                "raw_status": outcome.raw_status,
                "error": _text(outcome.error),
                "metrics": outcome.metrics or {},
                "completed_at": now,
                "updated_at": now,
                "next_attempt_at": None,
                "lease_owner": None,
                "leased_until": None,
            }
            # Failed and canceled jobs keep no output: only copied files are owned.
            values["output"] = outcome.output if outcome.state is JobState.COMPLETED else None
            if outcome.logs is not None:
                values["logs"] = _text(outcome.logs)
            if old.started_at is None and outcome.state is JobState.COMPLETED:
                values["started_at"] = old.submitted_at or now
            row = (
                await conn.execute(
                    jobs.update()
                    .where(jobs.c.id == job_id, jobs.c.state.in_(_ACTIVE))
                    .values(**values)
                    .returning(*jobs.c)
                )
            ).first()
            if row is None:
                return None
            if outcome.assets:
                await conn.execute(
                    assets.insert(),
                    [{**a.__dict__, "job_id": job_id, "created_at": now} for a in outcome.assets],
                )
            new = _job(row)
            await self._planner.write(conn, old, new, now)
            return new

    # --- cancel and deadlines -------------------------------------------------------

    async def request_cancel(self, job_id: str) -> Job:
        """Mark a cancel request (idempotent); returns the job as it stands."""
        now = self._clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update()
                .where(
                    jobs.c.id == job_id,
                    jobs.c.state.in_(_ACTIVE),
                    jobs.c.cancel_requested_at.is_(None),
                )
                .values(cancel_requested_at=now, updated_at=now)
            )
        return await self.get(job_id)

    async def mark_cancel_sent(self, job_id: str) -> None:
        """Record that the provider was asked to cancel."""
        now = self._clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                jobs.update().where(jobs.c.id == job_id).values(cancel_sent_at=now, updated_at=now)
            )

    async def unsubmitted_to_cancel(self, limit: int) -> list[Job]:
        """Unsubmitted jobs with a cancel request or a passed deadline (not leased)."""
        now = self._clock()
        query = (
            sa.select(jobs)
            .where(
                jobs.c.state.in_(_UNSUBMITTED),
                jobs.c.submitted_at.is_(None),
                sa.or_(jobs.c.cancel_requested_at.is_not(None), jobs.c.deadline <= now),
                lease.unleased(jobs, now),
            )
            .limit(limit)
        )
        return await self._select(query)

    async def submitted_to_cancel(self, resend_before: datetime, limit: int) -> list[Job]:
        """Submitted active jobs that need a provider cancel (again).

        A cancel is due when one was requested or the deadline passed, and none was sent
        yet or the last one went out before ``resend_before`` without a terminal event
        following (a provider may acknowledge a cancel and still miss it: providers.md
        §1.7).
        """
        now = self._clock()
        query = (
            sa.select(jobs)
            .where(
                jobs.c.state.in_(_ACTIVE),
                jobs.c.submitted_at.is_not(None),
                sa.or_(jobs.c.cancel_requested_at.is_not(None), jobs.c.deadline <= now),
                sa.or_(jobs.c.cancel_sent_at.is_(None), jobs.c.cancel_sent_at <= resend_before),
            )
            .limit(limit)
        )
        return await self._select(query)

    async def overdue(
        self, *, cancel_before: datetime, created_before: datetime, limit: int
    ) -> list[Job]:
        """Active jobs the gateway must end itself.

        ``cancel_before``: a cancel was requested, or the deadline passed, before this
        time and no terminal event followed. ``created_before``: a job without a deadline
        of its own created before this (the gateway's maximum job lifetime).
        """
        query = (
            sa.select(jobs)
            .where(
                jobs.c.state.in_(_ACTIVE),
                sa.or_(
                    jobs.c.cancel_requested_at <= cancel_before,
                    jobs.c.deadline <= cancel_before,
                    sa.and_(jobs.c.deadline.is_(None), jobs.c.created_at <= created_before),
                ),
            )
            .limit(limit)
        )
        return await self._select(query)
