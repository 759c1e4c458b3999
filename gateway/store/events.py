"""Provider events: verified webhook bodies, stored once, applied in order per job.

:class:`gateway.intake.Intake` adds a body after it was verified (deduplicated on its
SHA-256 per job); bodies that arrive together are stored in one transaction, with the
postponed checks of their jobs (:mod:`gateway.store.engine.group`).
:class:`gateway.intake.EventProcessor` claims pending events with a lease
(:mod:`gateway.store.lease`) and marks each one processed when it was applied (a round's
marks share a transaction), or releases it for a later retry; both only while it still
holds the lease (a process whose lease ran out must not settle an event another process
now holds). While a round applies its events (a terminal one copies the outputs, which
may take longer than a lease), :meth:`ProviderEvents.holding` renews their leases every
quarter of a lease, so no other process claims and applies them meanwhile
(:mod:`gateway.store.heartbeat`).

An event stored by this process is stored already leased to it and handed to the
processor in memory (:meth:`ProviderEvents.claim` returns those first): no claim
transaction, no wait for a round; the claim renews their leases (in one statement) when
less than three quarters of a lease is left. The row is committed before the webhook is
acknowledged, so a process that dies first loses nothing: once the lease runs out, any
process claims the event from the store; a process that stops gracefully gives back
those its processor has not taken (:meth:`ProviderEvents.release_handed`), for the next
process to claim at once.

A body its caller can apply at once (:meth:`ProviderEvents.add_applied`) is applied in
the transaction that stores it when nothing else of its job waits (on a SQLite file
:mod:`gateway.store.applied`, on PostgreSQL :mod:`gateway.store.pgapplied`); anything
else is stored for the processor as below.

Per job, events are applied in the order they were stored (by id; docs/lifecycle.md,
"Order of a job's provider events"): an event is not claimed, or taken from memory, while
an earlier unprocessed event of its job is held by another process or waits (for a
retry's backoff, or for a claim); it waits in the store until then
(:mod:`gateway.store.eventorder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from contracts.errors import ServiceUnavailable
from contracts.job import Job
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.store import eventorder, lease, outbox
from gateway.store.applied import Applying, Stored, add_engine, add_fast, sqlite_row
from gateway.store.engine.aio import Engine
from gateway.store.engine.fastwrite import FastWrites, in_list, sqlite_time
from gateway.store.engine.group import Group
from gateway.store.heartbeat import RENEWALS_PER_LEASE, Heartbeat
from gateway.store.pgapplied import PgApplied
from gateway.store.reader import SqliteReads
from gateway.store.records import ProviderEvent
from gateway.store.schema import provider_events

__all__ = ["INLINE_BYTES", "Applying", "ProviderEvents", "Stored"]


@dataclass(frozen=True)
class _New:
    job_id: str
    provider: str
    event_key: str
    body: bytes
    check_after: datetime | None
    applying: Applying | None = None


INLINE_BYTES = 64 * 1024  # bodies up to this are hashed and stored on the loop (and applied)
MAX_HANDED = 1024  # events held in memory for the processor; more wait in the store
STORE_EVERY_S = 1.0  # the store's events are claimed at least this often (ProviderEvents.claim)
STORE_EVERY = timedelta(seconds=STORE_EVERY_S)
_KEPT_SHARE = 1 - 1 / RENEWALS_PER_LEASE  # a lease with this share left lasts till a renewal


def _key(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class ProviderEvents(lease.Leasing):
    """Stores, claims and settles provider events.

    Constructed like :class:`gateway.store.lease.Leasing`.
    """

    def __init__(
        self, engine: Engine, *, owner: str, lease_s: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(engine, owner=owner, lease_s=lease_s, clock=clock)
        self._adds: Group[_New, Stored] = Group("provider-events", self._add_group,
                                                 max_items=128)
        self._marks: Group[int, bool] = Group("event-marks", self._mark_group, max_items=500)
        self._reads = SqliteReads(engine)
        self._fast = FastWrites(engine)  # the hot transactions on SQLite (engine/fastwrite.py)
        self._pg = PgApplied(engine)  # add_applied's transaction on PostgreSQL
        self._handed: deque[tuple[datetime, ProviderEvent]] = deque()  # (lease end, event)
        self._heartbeat = Heartbeat(engine, self._held, lease_length=self._lease_length,
                                    clock=clock)
        self._store_due = datetime.min.replace(tzinfo=UTC)  # when the store is next asked

    async def add(
        self, job_id: str, provider: str, body: bytes, *, check_after: datetime | None = None
    ) -> bool:
        """Store a verified body; True if it was new, False for a duplicate of the job's.

        With ``check_after``, a new event also pushes the job's next poll or watchdog
        probe back to then (:meth:`gateway.store.claims.Claims.postpone_check`), in the
        same transaction.

        Raises
        ------
        ServiceUnavailable
            The event could not be stored (answer 503 so the provider retries).
        """
        return (await self._store(_New(job_id, provider, "", body, check_after))).new

    async def add_applied(
        self, job_id: str, provider: str, body: bytes, applying: Applying, *,
        check_after: datetime | None = None,
    ) -> Stored:
        """:meth:`add`, applying the body in the transaction that stores it when it can
        (the module docstring): then the event is stored processed and ``Stored.applied``
        is True; otherwise it is stored for the processor as by :meth:`add`.

        Raises
        ------
        ServiceUnavailable
            The event could not be stored (answer 503 so the provider retries).
        """
        return await self._store(_New(job_id, provider, "", body, check_after, applying))

    @property
    def applies_as_stored(self) -> bool:
        """Whether :meth:`add_applied` may apply here at all (a SQLite file, PostgreSQL);
        else it stores only, and its caller need not prepare an :class:`Applying`."""
        return self._fast.available or self._pg.available

    async def job_row(self, job_id: str) -> tuple[tuple[Any, ...], Job] | None:
        """``(row, job)`` as ``Applying.row`` and ``Applying.job`` take them; None when
        there is no such job or it could not be read (then the processor applies)."""
        return await self._pg.row(job_id) if self._pg.available else sqlite_row(self._reads,
                                                                                job_id)

    async def close(self) -> None:
        """Give back the connections of :mod:`gateway.store.pgapplied` (none on SQLite)."""
        await self._pg.close()

    async def _store(self, new: _New) -> Stored:
        body = new.body
        # Hashing megabytes would stall every other request: on a worker thread.
        if len(body) > INLINE_BYTES:
            event_key = await asyncio.to_thread(_key, body)
        else:
            event_key = _key(body)
        try:
            return await self._adds(dataclasses.replace(new, event_key=event_key))
        except SQLAlchemyError as exc:
            raise ServiceUnavailable("the event could not be stored; retry later") from exc

    async def _add_group(self, group: list[_New]) -> list[Stored | BaseException]:
        now = self._clock.now()
        # Leased to this process at once, and handed over in memory after the commit.
        hand = len(self._handed) + len(group) <= MAX_HANDED
        until = now + self._lease_length if hand else None
        news = sorted(group, key=lambda e: e.job_id)  # jobs rows locked in id order
        rows = [
            {
                "job_id": e.job_id,
                "provider": e.provider,
                "event_key": e.event_key,
                "body": e.body,
                "received_at": now,
                "lease_owner": self._owner if hand else None,
                "leased_until": until,
            }
            for e in news
        ]
        checks = {(e.job_id, e.event_key): e.check_after for e in group}
        small = all(len(e.body) <= INLINE_BYTES for e in group)
        applied: dict[tuple[str, str], tuple[Job, Job | None]] = {}
        stored = None
        if small:
            applyings, dialect = [e.applying for e in news], self._engine.dialect
            stored = self._fast.run(
                lambda conn: add_fast(conn, rows, checks, applyings, applied, dialect, now))
            if stored is None and any(applyings):
                stored = await self._pg.add(rows, checks, applyings, applied, now)
        if stored is None:
            applied.clear()  # rolled back, if anything was
            stored = await add_engine(self._engine, rows, checks)
        results: list[Stored | BaseException] = []
        handed: list[ProviderEvent] = []
        for e in group:
            key = (e.job_id, e.event_key)
            event_id = stored.pop(key, None)  # once within the group
            if event_id is None:
                results.append(Stored(new=False))
            elif key in applied:
                old, written = applied[key]
                if written is not None and old.state is not written.state:
                    outbox.log_transition(old, written)
                results.append(Stored(new=True, applied=True, job=written, event_id=event_id))
            else:
                results.append(Stored(new=True, event_id=event_id))
                handed.append(ProviderEvent(event_id, e.job_id, e.provider, e.body))
        if until is not None:
            self._handed.extend((until, event) for event in sorted(handed, key=lambda e: e.id))
        return results

    async def claim(self, limit: int) -> list[ProviderEvent]:
        """Lease up to ``limit`` unprocessed events, in order per job, each with a whole
        lease (``lease_s``) from now: those this process stored (already leased to it, see
        the module docstring) before any in the store. The store is asked too at least
        every :data:`STORE_EVERY_S` seconds, so a steady stream of handed events never
        starves those only the store holds (another process's whose lease ran out,
        retries after a backoff, those beyond :data:`MAX_HANDED`). Apply them inside
        :meth:`holding`."""
        now = self._clock.now()
        if now < self._store_due:
            handed = await self._take_handed(limit, now)
            if handed:
                return handed
        else:  # a quarter of the round is kept for the store's
            handed = await self._take_handed(limit - max(1, limit // 4), now)
        self._store_due = now + STORE_EVERY
        if self._reads.exists(eventorder.CLAIMABLE_SQL, (now, now)) is False:
            return handed  # nothing to claim: no write transaction (SQLite, store/reader.py)
        return handed + await self._claim_stored(limit - len(handed), now)

    async def _claim_stored(self, limit: int, now: datetime) -> list[ProviderEvent]:
        """Lease up to ``limit`` unleased events, oldest first, passing over each one that
        an earlier unprocessed event of its job holds back: one leased (held, or waiting
        for a retry), or locked by a concurrent claim (PostgreSQL's SKIP LOCKED skipped it,
        but the second query sees it)."""
        pending = (
            sa.select(provider_events.c.id, provider_events.c.job_id)
            .where(provider_events.c.processed_at.is_(None), lease.unleased(provider_events, now))
            .order_by(provider_events.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        async with self._engine.begin() as conn:
            candidates = (await conn.execute(pending)).all()
            if not candidates:
                return []
            ids = [c.id for c in candidates]
            others = sa.select(provider_events.c.id, provider_events.c.job_id).where(
                provider_events.c.job_id.in_(sorted({c.job_id for c in candidates})),
                provider_events.c.processed_at.is_(None),
                provider_events.c.id < ids[-1],
                provider_events.c.id.not_in(ids),
            )
            free = eventorder.free_of_earlier(candidates, await conn.execute(others))
            rows = await lease.lease(
                conn, provider_events, free, owner=self._owner, until=now + self._lease_length
            )
        return [ProviderEvent(r.id, r.job_id, r.provider, r.body) for r in rows]

    async def _take_handed(self, limit: int, now: datetime) -> list[ProviderEvent]:
        """Up to ``limit`` events stored here, their leases renewed to a whole ``lease_s``
        from ``now``, in one transaction, only while this process still holds them: one
        another process took once its lease ran out (this one stalled) is dropped. So is,
        given back to the store unleased, one that an earlier unprocessed event of its job
        holds back (leased elsewhere, waiting for a retry or for a claim; the module
        docstring), and every later event of that job taken with it.

        The usual case writes nothing: events that still have the part of their lease
        that :meth:`holding` renews before it runs out (written less than ``lease_s`` /
        :data:`RENEWALS_PER_LEASE` ago) keep it, once a read (on SQLite the lock-free
        reader's) has found no earlier event of their jobs that may hold them back."""
        count = min(limit, len(self._handed))
        pairs = [self._handed.popleft() for _ in range(count)]
        if not pairs:
            return []
        taken = [event for _, event in pairs]
        ids = [e.id for e in taken]
        fresh = min(end for end, _ in pairs) - now >= self._lease_length * _KEPT_SHARE
        owner = self._owner
        if fresh and not await eventorder.may_be_held_back(
            self._engine, self._reads, taken, owner, now
        ):
            return taken
        until = now + self._lease_length
        renewed = self._fast.run(lambda c: eventorder.renew_fast(c, ids, owner, now, until))
        if renewed is None:
            renewed = await eventorder.renew_engine(
                self._engine, self._held(ids), ids, owner, now, until
            )
        kept = eventorder.in_order(taken, renewed)
        back = sorted(set(ids) - {e.id for e in kept})
        if back:  # rare: held back, or taken by another process meanwhile
            async with self._engine.begin() as conn:
                await conn.execute(self._held(back).values(lease_owner=None, leased_until=None))
        return kept

    @contextlib.asynccontextmanager
    async def holding(self, events: Sequence[ProviderEvent]) -> AsyncIterator[None]:
        """While the body applies ``events`` (from :meth:`claim`), renew the leases of those
        not yet settled every ``lease_s`` / :data:`RENEWALS_PER_LEASE` seconds, so an
        apply longer than a lease (an output download) is not claimed and repeated by
        another process. One whose lease was lost meanwhile (the store was out of reach
        for most of a lease) is logged as ``provider_event_lease_lost``; its apply goes
        on (the finalizer is idempotent), and its mark is refused."""
        async with self._heartbeat.holding(events):
            yield

    async def release_handed(self) -> int:
        """At a stop: give back the events stored here that the processor has not taken,
        so that the next process claims them at once rather than once their lease has run
        out (a deploy would otherwise hold their predictions up to ``lease_s``). Returns how
        many were released; 0, leaving the leases to run out, when the store fails."""
        ids = sorted(event.id for _, event in self._handed)
        self._handed.clear()
        if not ids:
            return 0
        try:
            async with self._engine.begin() as conn:
                done = await conn.execute(
                    self._held(ids).values(lease_owner=None, leased_until=None)
                )
        except SQLAlchemyError:
            return 0
        return int(done.rowcount)

    async def mark_processed(self, event_id: int) -> bool:
        """Record that an event was applied (or refused) and release its lease; only if
        this process still holds the lease. True when it did."""
        self._heartbeat.settled(event_id)  # settled: no renewal now
        return await self._marks(event_id)

    async def _mark_group(self, ids: list[int]) -> list[bool | BaseException]:
        now = sqlite_time(self._clock.now())
        sql = _MARK_SQL.format(in_list(len(ids)))
        fast = self._fast.run(lambda c: {r[0] for r in c.execute(sql, (now, *ids, self._owner))})
        if fast is not None:
            return [event_id in fast for event_id in ids]
        async with self._engine.begin() as conn:
            done = await conn.execute(
                self._held(ids)
                .values(lease_owner=None, processed_at=self._clock.now(), leased_until=None)
                .returning(provider_events.c.id)
            )
            marked = set(done.scalars())
        return [event_id in marked for event_id in ids]

    async def keep(self, event_id: int, body: bytes) -> None:
        """Store an applied event's kept body (:func:`adapters.errortext.kept_body`): its
        apply needed the raw one, diagnosis needs no payloads."""
        async with self._engine.begin() as conn:
            await conn.execute(provider_events.update()
                               .where(provider_events.c.id == event_id).values(body=body))

    async def release(self, event_id: int, *, until: datetime) -> bool:
        """Give a held event back, not to be claimed again before ``until`` (a retry's
        backoff); only if this process still holds the lease. True when it did. The
        job's later events wait in the store meanwhile (the module docstring)."""
        self._heartbeat.settled(event_id)
        async with self._engine.begin() as conn:
            done = await conn.execute(
                self._held([event_id]).values(lease_owner=None, leased_until=until)
            )
        return bool(done.rowcount)

    def _held(self, ids: list[int]) -> sa.Update:
        return provider_events.update().where(
            provider_events.c.id.in_(ids),
            provider_events.c.lease_owner == self._owner,
            provider_events.c.processed_at.is_(None),
        )


_MARK_SQL = (
    "UPDATE provider_events SET lease_owner = NULL, processed_at = ?, leased_until = NULL"
    " WHERE id IN ({}) AND lease_owner = ? AND processed_at IS NULL RETURNING id"
)
