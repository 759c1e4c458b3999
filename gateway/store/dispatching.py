"""The dispatcher's claim: unsubmitted, due jobs of a provider, within its concurrency.

:class:`DispatchClaims` is the part of :class:`gateway.store.claims.Claims` (and so of
:class:`gateway.store.jobs.JobStore`) the dispatcher calls once a round per provider. A
round is one transaction serialised per provider (a transaction-scoped advisory lock on
PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), so ``max_concurrency`` holds across gateway
processes. Its statements, in order:

1. at most :data:`SMALL_ROUND` + 1 waiting jobs (none: the round ends here, without a
   count), read from two ranges of an index (:func:`gateway.store.dispatchsql.head`);
2. how many jobs the provider has in flight (a ``count(*)`` over the active jobs, less
   those the provider reported lost when that means it is not running them
   (``Capabilities.lost_is_idle``: Cog); on SQLite, when the jobs table has never held half
   as many rows as ``max_concurrency``, ``max(rowid)`` stands for it: no more jobs than
   that can be in flight, and the round may still take at least half the limit);
3. when more jobs wait than the round may take (or than :data:`SMALL_ROUND`), each API
   token's first waiting jobs by priority and age (a window function), for the fair order
   (:func:`gateway.fairness.fair_order`) to choose from;
4. the lease of the chosen jobs, returning their rows: one ``UPDATE ... WHERE id IN
   (...) RETURNING``, the select of the chosen ids (still due) inside it, on PostgreSQL
   ``FOR UPDATE SKIP LOCKED``.

On SQLite the lock-free reader (:mod:`gateway.store.reader`) is asked first whether any
job of the provider may wait (:data:`_MAY_WAIT_SQL`: unsubmitted and due, a superset of
statement 1's), on PostgreSQL one ``SELECT`` outside a transaction (:data:`_MAY_WAIT`);
when none does the round ends without a transaction. A job committed just after that
read wakes the dispatcher again, as one committed after statement 1 does.

On a SQLite file the round runs through ``sqlite3`` when it can
(:mod:`gateway.store.engine.fastwrite`: the same ``BEGIN IMMEDIATE``, the same statements
compiled once from the ones below, at a tenth of the engine's per-statement CPU;
docs/benchmarks.md, "The claim on sqlite3"): every round with a fair order (the
dispatcher's). A round without one over more jobs than it may take (oldest first), a
locked file or any ``sqlite3`` error rolls back, nothing written, and runs through the
engine as before.

Each claimed job's callback token comes back with its row and is kept until the next
round, so the submit that follows does not read it again (:meth:`claimed_token`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from contracts.job import Job
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.fairness import Candidate
from gateway.store import dispatchsql, lease
from gateway.store.dispatchsql import SMALL_ROUND
from gateway.store.engine.aio import Connection, Engine
from gateway.store.engine.fastwrite import (
    Compiled,
    FastWrites,
    SqliteConnection,
    in_list,
    result_processor,
)
from gateway.store.ordering import lock_key
from gateway.store.reader import ROWS_SQL, SqliteReads, job_of
from gateway.store.records import UNSUBMITTED as _UNSUBMITTED
from gateway.store.records import job_from_row as _job
from gateway.store.schema import jobs

__all__ = ["MAYBE_SUBMITTED", "RESUBMITTING", "SMALL_ROUND", "SUBMITTING", "DispatchClaims"]

SUBMITTING = "submitting"
"""``raw_status`` of a job claimed for dispatch: its submit may be on the wire."""
RESUBMITTING = "resubmitting"
"""``raw_status`` of a job claimed for dispatch again after a submit that may have
reached the provider; the dispatcher defers it under this status whatever the new
submit's answer (a busy provider says nothing about the earlier submit)."""
MAYBE_SUBMITTED = (SUBMITTING, RESUBMITTING, "unreachable")
"""``raw_status`` values of unsubmitted jobs the provider may nevertheless have: a claim
whose process died during the submit, or a submit that failed in transit (timeout, 5xx);
not one that found no connection (``not_connected``, ``UpstreamUnreachable``: nothing
was sent).
Such a job is never ended here as "never submitted": it goes back to the dispatcher,
whose idempotent submit learns the provider's id, so a cancel or deadline reaches the
provider (docs/reliability.md, "Crash soak")."""

_MAY_WAIT_SQL = (  # one branch per range of the (state, next_attempt_at) index, as head's
    "SELECT 1 WHERE EXISTS (SELECT 1 FROM jobs WHERE provider = ?"
    " AND state IN ('creating', 'queued') AND submitted_at IS NULL AND next_attempt_at <= ?)"
    " OR EXISTS (SELECT 1 FROM jobs WHERE provider = ?"
    " AND state IN ('creating', 'queued') AND submitted_at IS NULL AND next_attempt_at IS NULL)"
)
_ROWS_EVER_SQL = "SELECT max(rowid) FROM jobs"
_ROWS_EVER: sa.Select[Any] = sa.select(sa.func.max(sa.literal_column("rowid"))).select_from(jobs)


# The round's statements, built once: the provider, the time and the chosen ids bound at
# execution (building them per round was most of the claim's own CPU: docs/benchmarks.md).
_NOW: sa.BindParameter[datetime] = sa.bindparam("d_now", type_=jobs.c.next_attempt_at.type)
_PROVIDER: sa.BindParameter[str] = sa.bindparam("d_provider", type_=jobs.c.provider.type)
_CHOSEN: sa.BindParameter[list[str]] = sa.bindparam("d_chosen", expanding=True)
_UNSUBMITTED_WHERE = [
    jobs.c.provider == _PROVIDER,
    jobs.c.state.in_(_UNSUBMITTED),
    jobs.c.submitted_at.is_(None),
    sa.or_(
        jobs.c.raw_status.in_(MAYBE_SUBMITTED),  # canceled or not: see MAYBE_SUBMITTED
        sa.and_(
            jobs.c.cancel_requested_at.is_(None),
            sa.or_(jobs.c.deadline.is_(None), jobs.c.deadline > _NOW),
        ),
    ),
    lease.unleased(jobs, _NOW),
]
_WAITING_WHERE = [
    *_UNSUBMITTED_WHERE,
    sa.or_(jobs.c.next_attempt_at.is_(None), jobs.c.next_attempt_at <= _NOW),
]
_HEAD = dispatchsql.head(_UNSUBMITTED_WHERE, _NOW)
_MAY_WAIT = sa.select(sa.or_(*(  # _MAY_WAIT_SQL for the engine (PostgreSQL), built once
    sa.exists().where(jobs.c.provider == _PROVIDER, jobs.c.state.in_(_UNSUBMITTED),
                      jobs.c.submitted_at.is_(None), due)
    for due in (jobs.c.next_attempt_at <= _NOW, jobs.c.next_attempt_at.is_(None)))))
_IN_FLIGHT = {idle: dispatchsql.in_flight(_PROVIDER, _NOW, idle) for idle in (False, True)}
_CANDIDATES = dispatchsql.ranked_candidates(_WAITING_WHERE)
_DUE_CHOSEN = sa.select(jobs.c.id).where(jobs.c.id.in_(_CHOSEN), *_WAITING_WHERE)
_MAYBE = sa.case((jobs.c.raw_status.in_(MAYBE_SUBMITTED), RESUBMITTING), else_=SUBMITTING)


def _lease(chosen: sa.Select[Any]) -> sa.Update:
    """The lease of the jobs ``chosen`` selects (still due: the waiting conditions)."""
    return (
        jobs.update()
        .where(jobs.c.id.in_(chosen.correlate(None).scalar_subquery()))
        .values(lease_owner=sa.bindparam("d_owner", type_=jobs.c.lease_owner.type),
                leased_until=sa.bindparam("d_until", type_=jobs.c.leased_until.type),
                raw_status=_MAYBE)
    )


_LEASE = _lease(_DUE_CHOSEN)  # SQLite: the file is held, select and lease in one
_LEASE_CHOSEN = {  # by dialect; PostgreSQL's skips rows another transaction holds
    "sqlite": _LEASE.returning(*jobs.c),
    "postgresql": _lease(_DUE_CHOSEN.with_for_update(skip_locked=True)).returning(*jobs.c),
}
_LEASED_IDS = _LEASE.returning(jobs.c.id, jobs.c.provider, jobs.c.callback_token)  # sqlite3's


class _NeedsEngine(Exception):  # a signal, not an error: the round goes through the engine
    """The ``sqlite3`` round would lease the oldest of a long queue (no fair order: not
    the dispatcher's round); rolled back."""


@functools.lru_cache(maxsize=4)
def _fast_statements(dialect: sa.Dialect) -> dict[str, Compiled]:
    """The round's statements compiled for the ``sqlite3`` path (built once per dialect)."""
    return {"head": Compiled(_HEAD, dialect), "lease": Compiled(_LEASED_IDS, dialect),
            "candidates": Compiled(_CANDIDATES, dialect),
            **{f"in_flight_{idle}": Compiled(_IN_FLIGHT[idle], dialect)
               for idle in (False, True)}}


class DispatchClaims(lease.Leasing):
    """The dispatcher's claim (see the module docstring)."""

    def __init__(
        self, engine: Engine, *, owner: str, lease_s: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(engine, owner=owner, lease_s=lease_s, clock=clock)
        self.fast_reads = SqliteReads(engine)  # lock-free reads on SQLite (store/reader.py)
        self._fast_claims = FastWrites(engine)  # the claim on a SQLite file (module docstring)
        self._claimed_tokens: dict[str, tuple[str, str]] = {}  # the last round's, by job id

    def claimed_token(self, job_id: str) -> tuple[str, str] | None:
        """``(provider, callback_token)`` of a job the last dispatch round claimed, else
        None. A job's callback token never changes, so the one the claim read is the one
        the store holds."""
        return self._claimed_tokens.get(job_id)

    async def claim_dispatch(
        self,
        provider: str,
        max_concurrency: int,
        order: Callable[[list[Candidate], int], list[Candidate]] | None = None,
        *,
        lost_is_idle: bool = False,
    ) -> list[Job]:
        """Lease unsubmitted, due jobs of ``provider``, up to ``max_concurrency`` minus the
        provider's jobs in flight (submitted and active, or leased for dispatch right now,
        by any process); with ``lost_is_idle``, not those it reported lost
        (:func:`gateway.store.dispatchsql.in_flight`).

        Without ``order``, oldest first. With it (:func:`gateway.fairness.fair_order`),
        each API token's first waiting jobs (by priority, then age) are the candidates (a
        window function, so a token with thousands waiting cannot crowd the others out)
        and ``order`` picks which go; when every waiting job may go, they all are the
        candidates. The round's statements: the module docstring.
        """
        now = self._clock.now()
        bound = {"d_provider": provider, "d_now": now}
        if not await self._may_wait(bound):
            return []  # nothing waiting (the module docstring): no transaction
        until = now + self._lease_length
        try:
            fast = self._fast_claims.run(functools.partial(
                self._claim_fast, bound, until, max_concurrency, order, lost_is_idle))
        except _NeedsEngine:
            fast = None  # rolled back: nothing written
        if fast is not None:
            found, tokens, rank = fast
        else:
            found, tokens, rank = await self._claim_engine(
                bound, until, max_concurrency, order, lost_is_idle)
        self._claimed_tokens = tokens
        if rank is None:
            return sorted(found, key=lambda job: (job.created_at, job.id))  # oldest first
        return sorted(found, key=lambda job: rank[job.id])

    async def _may_wait(self, bound: dict[str, Any]) -> bool:
        """Whether any job of the provider may wait (:data:`_MAY_WAIT`: a superset of
        statement 1's), by SQLite's lock-free reader, or on PostgreSQL by one ``SELECT``
        outside a transaction (one round trip where the round's transaction takes four);
        True when neither answers."""
        found = self.fast_reads.exists(
            _MAY_WAIT_SQL, (bound["d_provider"], bound["d_now"], bound["d_provider"]))
        if found is not None:
            return found
        if self._engine.dialect.name != "postgresql":
            return True
        async with self._engine.read() as conn:
            return bool((await conn.execute(_MAY_WAIT, bound)).scalar())

    def _claim_fast(
        self, bound: dict[str, Any], until: datetime, max_concurrency: int,
        order: Callable[[list[Candidate], int], list[Candidate]] | None, lost_is_idle: bool,
        conn: SqliteConnection,
    ) -> tuple[list[Job], dict[str, tuple[str, str]], dict[str, int] | None]:
        """:meth:`_claim_engine` on ``sqlite3`` inside ``BEGIN IMMEDIATE`` (the module
        docstring); :class:`_NeedsEngine` for oldest first over a long queue."""
        sql = _fast_statements(self._engine.dialect)
        created = result_processor(jobs, self._engine.dialect, "created_at")
        assert created is not None
        head = sorted(
            (Candidate(r[0], r[1] or "", r[2], created(r[3])) for r in sql["head"](conn, bound)),
            key=lambda c: (c.created_at, c.id),
        )
        if not head:
            return [], {}, None
        rows_ever = int(conn.execute(_ROWS_EVER_SQL).fetchone()[0] or 0)
        if rows_ever * 2 <= max_concurrency:
            in_flight = rows_ever
        else:
            in_flight = int(sql[f"in_flight_{lost_is_idle}"](conn, bound).fetchone()[0])
        limit = max_concurrency - in_flight
        if limit <= 0:
            return [], {}, None
        all_fit = len(head) <= min(limit, SMALL_ROUND)
        if order is None and not all_fit:
            raise _NeedsEngine  # oldest first over a long queue: the engine's round
        candidates = head if all_fit else [
            Candidate(r[0], r[1] or "", r[2], created(r[3]))
            for r in sql["candidates"](conn, {**bound, **_candidate_limits(limit)})]
        chosen = candidates if order is None else order(candidates, limit)
        if not chosen:
            return [], {}, None
        leased = {**bound, "d_chosen": [c.id for c in chosen], "d_owner": self._owner,
                  "d_until": until}
        tokens = {row[0]: (row[1], row[2]) for row in sql["lease"](conn, leased)}
        if not tokens:
            return [], {}, None
        ids = sorted(tokens)
        found = [job_of(row) for row in conn.execute(ROWS_SQL.format(in_list(len(ids))), ids)]
        rank = None if order is None else {c.id: i for i, c in enumerate(chosen)}
        return found, tokens, rank

    async def _claim_engine(
        self, bound: dict[str, Any], until: datetime, max_concurrency: int,
        order: Callable[[list[Candidate], int], list[Candidate]] | None, lost_is_idle: bool,
    ) -> tuple[list[Job], dict[str, tuple[str, str]], dict[str, int] | None]:
        """The round through the engine: ``(jobs leased, their (provider, callback token)
        by id, the chosen order by id or None for oldest first)``."""
        provider = bound["d_provider"]
        rank: dict[str, int] | None = None
        rows: list[Any] = []
        async with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(lock_key(provider))))
            head = sorted(
                (Candidate(r.id, r.owner or "", r.priority, r.created_at)
                 for r in await conn.execute(_HEAD, bound)),
                key=lambda c: (c.created_at, c.id),
            )
            if not head:
                return [], {}, None  # nothing waiting (a round woken by a finished job)
            in_flight = await self._in_flight(conn, bound, max_concurrency, lost_is_idle)
            limit = max_concurrency - in_flight
            if limit <= 0:
                return [], {}, None
            all_fit = len(head) <= min(limit, SMALL_ROUND)
            if order is None and not all_fit:
                due = (
                    sa.select(jobs.c.id)
                    .where(*_WAITING_WHERE)
                    .order_by(jobs.c.created_at, jobs.c.id)
                    .limit(limit)
                )
                rows = await lease.claim(conn, jobs, due.params(bound), owner=self._owner,
                                         until=until, raw_status=_MAYBE)
            else:
                candidates = head if all_fit else await self._candidates(conn, bound, limit)
                chosen = candidates if order is None else order(candidates, limit)
                if not chosen:
                    return [], {}, None
                rank = {c.id: i for i, c in enumerate(chosen)}
                leased = {**bound, "d_chosen": [c.id for c in chosen], "d_owner": self._owner,
                          "d_until": until}
                rows = list(await conn.execute(_LEASE_CHOSEN[conn.dialect.name], leased))
        tokens = {row.id: (row.provider, row.callback_token) for row in rows}
        return [_job(row) for row in rows], tokens, rank

    async def _in_flight(
        self, conn: Connection, bound: dict[str, Any], max_concurrency: int, lost_is_idle: bool,
    ) -> int:
        """The provider's jobs in flight, or on SQLite a number no smaller when that leaves
        the round at least half of ``max_concurrency`` (the module docstring)."""
        if conn.dialect.name == "sqlite":
            # BEGIN IMMEDIATE holds the file and this transaction wrote nothing yet: the
            # lock-free reader sees what conn would (a statement through it: ~100 us)
            fast = self.fast_reads.value(_ROWS_EVER_SQL)
            found = fast[0] if fast is not None else (await conn.execute(_ROWS_EVER)).scalar()
            rows_ever = int(found or 0)
            if rows_ever * 2 <= max_concurrency:
                return rows_ever
        return int((await conn.execute(_IN_FLIGHT[lost_is_idle], bound)).scalar_one())

    async def _candidates(
        self, conn: Connection, bound: dict[str, Any], per_owner: int
    ) -> list[Candidate]:
        rows = await conn.execute(_CANDIDATES, {**bound, **_candidate_limits(per_owner)})
        return [Candidate(r.id, r.owner or "", r.priority, r.created_at) for r in rows]


def _candidate_limits(per_owner: int) -> dict[str, int]:
    """:data:`_CANDIDATES`' bounds for a round that may take ``per_owner`` jobs."""
    return {"d_per_owner": per_owner, "d_most": max(per_owner * 64, 512)}
