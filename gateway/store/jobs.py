"""The job store: every read and guarded write of the ``jobs`` table.

Queue half: :class:`gateway.store.claims.Claims`; values: :mod:`gateway.store.records`.
Transitions are guarded SQL naming their from-states (the table is in :mod:`gateway.store`);
nothing moves a job backwards (:func:`gateway.store.ordering.moves_back`). Outbox rows of a
transition are written in its transaction, their payload built before it begins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from contracts.errors import Conflict, NotFound
from contracts.job import Job
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.rollout.spec import HIDDEN_ARMS
from gateway.store import applying, outbox
from gateway.store.claims import Claims
from gateway.store.engine import errors
from gateway.store.engine.aio import Connection, Engine
from gateway.store.heartbeat import RENEWALS_PER_LEASE
from gateway.store.ordering import outcome_values, progress_columns
from gateway.store.reader import GET_JOB, GET_LEASED_JOB
from gateway.store.records import ACTIVE as _ACTIVE
from gateway.store.records import TERMINAL as _TERMINAL
from gateway.store.records import (
    AssetRecord,
    NewJob,
    Outcome,
    Progress,
    ValueRefused,
    new_row,
)
from gateway.store.records import job_from_row as _job
from gateway.store.schema import assets, jobs
from gateway.store.writes import JobWrites, Write

__all__ = ["AssetRecord", "JobStore", "NewJob", "Outcome", "Progress", "ValueRefused"]

_BATCH = 500
_WAITING_SQL = (
    "SELECT 1 FROM jobs WHERE provider = ? AND state IN ('creating', 'queued')"
    " AND submitted_at IS NULL LIMIT 1"
)


class JobStore(Claims):
    """Reads and guarded writes of jobs.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    planner : outbox.Planner
        Decides which outbound webhook events a transition causes.
    owner : str
        This process's lease owner id.
    lease_s : float
        How long a claim holds a job before another process may take it, in seconds.
    clock : Clock
        Injected time source.
    on_given_back : callable, optional
        Called with a job's id when :meth:`applying` gave its apply lease back (the job's
        provider events no longer wait for it): the gateway wakes its event processor.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        planner: outbox.Planner,
        owner: str,
        lease_s: float,
        clock: Clock = SYSTEM_CLOCK,
        on_given_back: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(engine, owner=owner, lease_s=lease_s, clock=clock)
        self._planner = planner
        self._writes = JobWrites(engine, planner, self.fast_reads, clock)
        self._given_back = on_given_back or (lambda job_id: None)

    @property
    def engine(self) -> Engine:
        """The engine, for tests that inspect or rewrite rows (the gateway never asks)."""
        return self._engine

    async def ping(self) -> None:
        """Run ``SELECT 1``; raises whatever the database raises when it cannot answer."""
        async with self._engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    # --- create and read -------------------------------------------------------------

    async def create(self, new: NewJob, shadow: NewJob | None = None) -> tuple[Job, bool]:
        """Insert a job in state ``creating``; return ``(job, created)``.

        With an idempotency key already used for the same request, the stored job comes
        back with ``created=False`` (docs/architecture.md, invariant 1). ``shadow`` (its
        hidden copy, docs/shadow.md) is inserted in the same statement, only when the job is new.

        Raises
        ------
        Conflict
            The key was used for a different request body.
        """
        now = new.created_at or self._clock.now()
        rows = [new_row(job, now) for job in (new, shadow) if job is not None]
        try:
            async with self._engine.begin() as conn:
                await conn.execute(jobs.insert(), rows)
        except IntegrityError as exc:
            with contextlib.suppress(NotFound):  # the id is this request's own (random):
                return await self.get(new.id), True  # stored by a try whose answer was lost
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
        fast = self.fast_reads.job(job_id)
        if fast is not None:
            found = fast[0]
        else:
            async with self._engine.read() as conn:
                row = (await conn.execute(GET_JOB, {"job_id": job_id})).first()
            found = None if row is None else _job(row)
        if found is None:
            raise NotFound(f"prediction {job_id!r} does not exist")
        return found

    async def get_applied(self, job_id: str) -> tuple[Job, datetime | None]:
        """The job with ``job_id`` and, while a loop applies its result under an apply
        lease (:mod:`gateway.store.applying`), when to look again: when that lease runs
        out, or a renewal period from now if sooner (its holder may give it up before);
        None when no result is being applied. One read, as :meth:`get`, on a connection
        the lifecycle may take (:meth:`Engine.lifecycle_read`). ``NotFound`` if there is
        no such job."""
        fast = self.fast_reads.leased_job(job_id)
        if fast is None:
            async with self._engine.lifecycle_read() as conn:
                row = (await conn.execute(GET_LEASED_JOB, {"job_id": job_id})).first()
            if row is None:
                raise NotFound(f"prediction {job_id!r} does not exist")
            fast = (_job(row), row.lease_owner, row.leased_until)
        job, owner, until = fast
        now = self._clock.now()
        held = applying.held_until(owner, until, now)
        if held is None:
            return job, None
        return job, min(held, now + self._lease_length / RENEWALS_PER_LEASE)

    def may_be_waiting(self, provider: str) -> bool:
        """Whether a job of ``provider`` may wait for dispatch (unsubmitted and active):
        False only when SQLite's lock-free reader says none does (store/reader.py), so a
        finished job need not wake the dispatcher for a slot nobody waits for."""
        return self.fast_reads.exists(_WAITING_SQL, (provider,)) is not False

    async def callback_token(self, job_id: str) -> tuple[str, str] | None:
        """``(provider, callback_token)`` of a job, or None if unknown. On PostgreSQL read
        on a connection the lifecycle may take (:meth:`Engine.lifecycle_read`): provider
        webhooks and submits never wait behind polling GETs."""
        claimed = self.claimed_token(job_id)  # the dispatcher's submit right after its claim
        if claimed is not None:
            return claimed
        fast = self.fast_reads.callback_token(job_id)
        if fast is not None:
            return fast[0]
        async with self._engine.lifecycle_read() as conn:
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
        tenant: str | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs, newest first. ``before``: only jobs strictly older than
        this ``(created_at, id)`` position; ``after``: only jobs strictly newer, the
        ``limit`` closest to it (still returned newest first); ``tenant``: only its."""
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
        query = query.where(jobs.c.arm.not_in(HIDDEN_ARMS))  # shadows are never listed
        if created_after is not None:
            query = query.where(jobs.c.created_at > created_after)
        if created_before is not None:
            query = query.where(jobs.c.created_at < created_before)
        query = query if tenant is None else query.where(jobs.c.tenant == tenant)
        async with self._engine.read() as conn:
            found = [_job(row) for row in await conn.execute(query)]
        return found[::-1] if after is not None else found

    async def terminal_among(self, job_ids: Sequence[str]) -> list[str]:
        """Which of ``job_ids`` are in a terminal state (asked in batches of 500)."""
        found: list[str] = []
        if not job_ids:
            return found
        async with self._engine.read() as conn:
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

    async def record_asset(self, job_id: str, record: AssetRecord) -> None:
        """Record an owned file of ``job_id`` (a staged input), once per key."""
        row = {**record.__dict__, "job_id": job_id, "created_at": self._clock.now()}
        with contextlib.suppress(IntegrityError):  # staged before: same key, same bytes
            async with self._engine.begin() as conn:
                await conn.execute(assets.insert().values(**row))

    # --- dispatch outcomes ----------------------------------------------------------

    async def mark_submitted(
        self, job_id: str, provider_job_id: str, progress: Progress,
        next_check_at: datetime | None, *, keep_lease: bool = False,
    ) -> Job | None:
        """Record that the provider accepted the job; apply its first snapshot; release the
        dispatcher's lease, unless ``keep_lease`` (a submit that answered with the result:
        the dispatcher holds the job while it applies it, see :meth:`applying`).

        Returns None when the job already ended (canceled, or finished by a webhook that
        overtook the submit); its provider job id and submit time are recorded anyway.
        """
        now = self._clock.now()
        released = {} if keep_lease else {"lease_owner": None, "leased_until": None}
        done = await self._transition(
            job_id,
            progress,
            extra={
                "provider_job_id": provider_job_id,
                "submitted_at": now,
                "next_attempt_at": next_check_at,
                **released,
            },
            allowed=_ACTIVE,
            force=True,
        )
        if done is None:
            async with self._engine.begin() as conn:
                await conn.execute(
                    jobs.update()
                    .where(jobs.c.id == job_id, jobs.c.provider_job_id.is_(None))
                    .values(
                        provider_job_id=provider_job_id,
                        submitted_at=sa.func.coalesce(jobs.c.submitted_at, now),
                    )
                )
        return done

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
        """Apply a non-terminal snapshot (and ``extra`` columns) to a job in ``allowed``.

        A snapshot older than what the job holds (:func:`moves_back`) changes nothing of
        the job's state, output, logs or raw status; ``extra`` is still written when
        ``force``. Returns the new job, or None when nothing was written.
        """

        def decide(old: Job) -> dict[str, Any] | None:
            if old.state.value not in allowed:
                return None
            values: dict[str, Any] = dict(extra) if force else {}
            now = self._clock.now()
            values.update(progress_columns(old, progress, now))
            return {**values, "updated_at": now} if values else None

        return await self._write(job_id, decide, allowed)

    async def _write(
        self,
        job_id: str,
        decide: Callable[[Job], dict[str, Any] | None],
        allowed: list[str],
        also: Callable[[Connection], Awaitable[object]] | None = None,
    ) -> Job | None:
        """One guarded write, group-committed (:mod:`gateway.store.writes`)."""
        return await self._writes.write(Write(job_id, decide, allowed, also))

    # --- the terminal write ------------------------------------------------------------

    async def finish(self, job_id: str, outcome: Outcome) -> Job | None:
        """Record the terminal state, its assets and its ``completed`` event, atomically.

        Returns the finished job, or None when the job was already terminal (or does
        not exist): a second call is a no-op (docs/architecture.md, invariant 3).

        Raises
        ------
        ValueRefused
            The store refuses a value of the outcome (:func:`gateway.store.engine.errors.refused`);
            a transient error is raised as is, so the caller retries rather than fail it.
        """
        try:
            return await self._finish(job_id, outcome)
        except DBAPIError as exc:
            if not errors.refused(exc):
                raise
            raise ValueRefused(type(exc).__name__, type(exc.orig).__name__) from exc

    async def _finish(self, job_id: str, outcome: Outcome) -> Job | None:
        def decide(old: Job) -> dict[str, Any] | None:
            return None if old.state.terminal else outcome_values(old, outcome, self._clock.now())

        async def record_assets(conn: Connection) -> None:
            now = self._clock.now()
            await conn.execute(
                assets.insert(),
                [{**a.__dict__, "job_id": job_id, "created_at": now} for a in outcome.assets],
            )

        also = record_assets if outcome.assets else None  # none: the sqlite3 path may take it
        return await self._write(job_id, decide, _ACTIVE, also=also)
