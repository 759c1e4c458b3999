"""Routes as data: every read and write of the ``routes`` and ``route_changes`` tables.

A route's live spec (:class:`gateway.rollout.spec.RouteSpec`) is one JSON row; every change
writes an audit row in the same transaction, so the highest audit id is the routes'
version: a process reloads its routes when it sees a new one (:mod:`gateway.rollout.sync`).
Seeding from the config file (docs/canary.md, "Which wins") never overwrites a change
made live: a route missing from the store is inserted; a route whose file entry changed
since it was last seeded takes the file's spec only when nobody changed it live since,
otherwise the store wins and :meth:`RouteBook.seed` says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from contracts.errors import ContractViolation, NotFound
from contracts.job import JobState
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.notify import LoopName, Notifier
from gateway.rollout.guard import Sample
from gateway.rollout.spec import AuditEntry, RouteSpec, change_problem
from gateway.store.engine.aio import Connection, Engine
from gateway.store.operatorhook import OperatorOutbox
from gateway.store.reader import SqliteReads
from gateway.store.records import ACTIVE
from gateway.store.rescue import Rescue, rescue
from gateway.store.schema import jobs, route_changes, routes

__all__ = ["RouteBook", "SeedNote", "TargetOf", "config_hash"]

log = logging.getLogger(__name__)
TargetOf = Callable[[str, str], "str | None"]
"""(route key, provider) -> the provider's own name for the route's model."""
#: The moved predictions' ids a rollback's audit lists (the count is always whole).
RESCUED_LISTED = 100

_FINISHED = [JobState.COMPLETED.value, JobState.FAILED.value]
_UNSUBMITTED = [JobState.CREATING.value, JobState.QUEUED.value]
MAX_SAMPLES = 10_000


def config_hash(spec: RouteSpec) -> str:
    """A digest of a spec as the config file gives it (to see when the file changed)."""
    text = json.dumps(spec.stored(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SeedNote:
    """What seeding did with one configured route: ``inserted``, ``unchanged``,
    ``file_applied`` (the file changed, nothing live: the file wins) or ``store_wins``
    (the file changed but the route was changed live: the store's spec stays)."""

    route: str
    outcome: str
    differs: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()  # the store's providers no longer configured (file applied)


def _differs(a: RouteSpec, b: RouteSpec) -> tuple[str, ...]:
    left, right = a.stored(), b.stored()
    return tuple(sorted(k for k in left if left[k] != right.get(k)))


def _entry(row: sa.Row[Any]) -> AuditEntry:
    return AuditEntry.model_validate(dict(row._mapping))


class RouteBook:
    """The routes in the store and their audit trail.

    Parameters
    ----------
    engine : Engine
        The process's engine (owned by the caller).
    clock : Clock
        Injected time source.
    target_of : TargetOf, optional
        The control's target for a route: with it, a rollback moves the candidate's
        never-accepted predictions to the control (:mod:`gateway.store.rescue`); without
        (a reader, the drift check), a rollback moves nothing.
    notifier : Notifier, optional
        This process's loops, woken to dispatch moved predictions at once.
    operator : OperatorOutbox, optional
        ``[operator_webhook]``: each live change enqueues its event in its own transaction
        (:mod:`gateway.store.operatorhook`); None: nothing is enqueued.
    """

    def __init__(
        self, engine: Engine, *, clock: Clock = SYSTEM_CLOCK, target_of: TargetOf | None = None,
        notifier: Notifier | None = None, operator: OperatorOutbox | None = None,
    ) -> None:
        self._engine = engine
        self._operator = operator
        self._clock = clock
        self._target_of = target_of
        self._notifier = notifier
        self._fast = SqliteReads(engine)  # the version poll takes no lock on SQLite

    async def seed(
        self, configured: dict[str, RouteSpec], providers: Collection[str] | None = None
    ) -> list[SeedNote]:
        """Bring the config file's routes into the store (see the module docstring).

        ``providers``: the configured provider names. A stored spec naming another (its
        provider section removed from the file after a migration) takes the file's spec,
        even when changed live: kept, a rollback (the guard's too) sent every new
        prediction to a provider no process has, where it stayed ``starting``, unlogged.
        """
        notes = []
        for key, spec in configured.items():
            try:
                notes.append(await self._seed_one(key, spec, providers))
            except IntegrityError:  # another process seeded it at the same moment
                notes.append(SeedNote(key, "unchanged"))
        return notes

    async def _seed_one(
        self, key: str, spec: RouteSpec, providers: Collection[str] | None
    ) -> SeedNote:
        seeded = config_hash(spec)
        async with self._engine.begin() as conn:
            row = await self._row(conn, key)
            if row is None:
                await conn.execute(
                    routes.insert().values(
                        key=key, spec=spec.stored(), config_hash=seeded,
                        changed_live=False, updated_at=self._clock.now(),
                    )
                )
                await self._audit(conn, key, "config", "seed", None, spec, "seeded from config")
                return SeedNote(key, "inserted")
            stored = RouteSpec.model_validate(row.spec)
            named = (stored.provider, stored.candidate)
            gone = tuple(p for p in named if p and providers is not None and p not in providers)
            if row.config_hash == seeded and not gone:
                return SeedNote(key, "unchanged", _differs(stored, spec))
            if row.changed_live and not gone:
                return SeedNote(key, "store_wins", _differs(stored, spec))
            await conn.execute(
                routes.update()
                .where(routes.c.key == key)
                .values(spec=spec.stored(), config_hash=seeded, changed_live=False,
                        updated_at=self._clock.now())
            )
            why = (f"the store's spec named provider(s) {', '.join(gone)}, no longer configured"
                   if gone else "the config file changed")
            await self._audit(conn, key, "config", "config", stored, spec, why)
            return SeedNote(key, "file_applied", _differs(stored, spec), gone)

    async def version(self) -> int:
        """The routes' version: the newest audit id (0 before any route exists)."""
        fast = self._fast.routes_version()
        if fast is not None:
            return fast[0]
        async with self._engine.connect() as conn:
            found = (await conn.execute(sa.select(sa.func.max(route_changes.c.id)))).scalar()
        return int(found or 0)

    async def load(self) -> tuple[int, dict[str, RouteSpec]]:
        """``(version, {route key: spec})`` read in one transaction."""
        async with self._engine.connect() as conn:
            version = (await conn.execute(sa.select(sa.func.max(route_changes.c.id)))).scalar()
            rows = (await conn.execute(sa.select(routes.c.key, routes.c.spec))).all()
        return int(version or 0), {r.key: RouteSpec.model_validate(r.spec) for r in rows}

    async def get(self, key: str) -> RouteSpec:
        """The stored spec of route ``key``; ``NotFound`` otherwise."""
        async with self._engine.connect() as conn:
            row = await self._row(conn, key)
        if row is None:
            raise NotFound(f"route {key!r} does not exist")
        return RouteSpec.model_validate(row.spec)

    async def change(
        self,
        key: str,
        *,
        who: str,
        action: str,
        reason: str,
        update: dict[str, Any],
        evidence: dict[str, Any] | None = None,
        only_if: Callable[[RouteSpec], bool] | None = None,
    ) -> AuditEntry | None:
        """Apply ``update`` (spec fields) to route ``key`` and audit it, in one transaction.

        Returns the audit entry, or None when ``only_if`` refused the current spec (e.g.
        the guard finds the canary already at 0); with ``operator``, the change's operator
        webhook event is enqueued in the same transaction. A ``rollback`` of a route with a
        candidate also moves the candidate's never-accepted predictions to the control
        (:mod:`gateway.store.rescue`); the audit's evidence says how many, and which, as
        ``rescued``.

        Raises
        ------
        NotFound
            No such route.
        ContractViolation
            An empty reason, the changed spec is invalid, or the change is refused
            (:func:`gateway.rollout.spec.change_problem`); nothing is changed.
        """
        if not reason.strip():
            raise ContractViolation("a route change needs a reason")
        async with self._engine.begin() as conn:
            row = await self._row(conn, key, lock=True)
            if row is None:
                raise NotFound(f"route {key!r} does not exist")
            before = RouteSpec.model_validate(row.spec)
            if only_if is not None and not only_if(before):
                return None
            try:
                after = RouteSpec.model_validate({**before.stored(), **update})
            except ValidationError as exc:
                raise ContractViolation(_problem(exc)) from exc
            problem = change_problem(before, after)
            if problem is not None:
                raise ContractViolation(problem)
            await conn.execute(
                routes.update()
                .where(routes.c.key == key)
                .values(spec=after.stored(), changed_live=True, updated_at=self._clock.now())
            )
            moved = await self._rescue(conn, key, who, action, before, after)
            if moved is not None:
                evidence = {**(evidence or {}), "rescued": {
                    "count": len(moved), "to": after.provider,
                    "predictions": moved[:RESCUED_LISTED]}}
            entry = await self._audit(conn, key, who, action, before, after, reason, evidence)
            told = self._operator is not None and await self._operator.write(conn, entry)
        if told and self._notifier is not None:
            self._notifier.wake(LoopName.DELIVERY)
        if moved:
            log.warning("predictions_rescued", extra={
                "route": key, "from": before.candidate, "to": after.provider,
                "count": len(moved), "change": entry.id})
            if self._notifier is not None:
                self._notifier.wake(LoopName.DISPATCHER)
        return entry

    async def rescue_stranded(self, key: str, spec: RouteSpec) -> int:
        """Move the never-accepted predictions still on the candidate of route ``key`` at
        canary 0 (a submit was under way at the rollback, then found no connection) to
        the control, as the rollback would, audited (``guard``, ``rescue``, evidence
        ``rescued``) with its operator event; how many moved (0 at canary > 0)."""
        if self._target_of is None or not spec.candidate or spec.canary_percent > 0:
            return 0
        move = Rescue(route=key, candidate=spec.candidate, control=spec.provider,
                      target=self._target_of(key, spec.provider),
                      why=f"route {key!r} rolled back; its submit was under way then")
        told: str | bool | None = None
        async with self._engine.begin() as conn:
            moved = await rescue(conn, move, self._clock.now())
            if moved:
                row = await self._row(conn, key)
                now = RouteSpec.model_validate(row.spec) if row is not None else spec
                why = (f"{len(moved)} prediction(s) whose submit was under way at the rollback "
                       f"moved from {spec.candidate!r} to the control {spec.provider!r}")
                entry = await self._audit(conn, key, "guard", "rescue", now, now, why, {
                    "rescued": {"count": len(moved), "to": spec.provider,
                                "predictions": moved[:RESCUED_LISTED]}})
                told = self._operator is not None and await self._operator.write(conn, entry)
        if told and self._notifier is not None:
            self._notifier.wake(LoopName.DELIVERY)
        if moved:
            log.warning("predictions_rescued", extra={"route": key, "from": spec.candidate,
                        "to": spec.provider, "count": len(moved), "change": entry.id})
            if self._notifier is not None:
                self._notifier.wake(LoopName.DISPATCHER)
        return len(moved)

    async def _rescue(
        self, conn: Connection, key: str, who: str, action: str, before: RouteSpec,
        after: RouteSpec,
    ) -> list[str] | None:
        """The ids a rollback moved to the control, or None when this change moves none
        (not a rollback, no candidate, no ``target_of``)."""
        if (action != "rollback" or self._target_of is None or not before.candidate
                or before.candidate == after.provider):
            return None
        move = Rescue(route=key, candidate=before.candidate, control=after.provider,
                      target=self._target_of(key, after.provider),
                      why=f"route {key!r} rolled back by {who}")
        return await rescue(conn, move, self._clock.now())

    async def history(self, key: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """Audit entries, newest first (of one route, or of all)."""
        query = sa.select(route_changes).order_by(route_changes.c.id.desc()).limit(limit)
        if key is not None:
            query = query.where(route_changes.c.route == key)
        async with self._engine.connect() as conn:
            return [_entry(r) for r in (await conn.execute(query)).all()]

    async def samples(self, key: str, since: datetime) -> list[Sample]:
        """Control and candidate predictions of route ``key`` finished since ``since``."""
        query = (
            sa.select(jobs.c.arm, jobs.c.state, jobs.c.created_at, jobs.c.completed_at)
            .where(
                jobs.c.route == key,
                jobs.c.completed_at >= since,
                jobs.c.state.in_(_FINISHED),
                jobs.c.arm.in_(["control", "candidate"]),
            )
            .order_by(jobs.c.completed_at.desc())
            .limit(MAX_SAMPLES)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            Sample(
                arm=r.arm,
                failed=r.state == JobState.FAILED.value,
                latency_s=max(0.0, (r.completed_at - r.created_at).total_seconds()),
            )
            for r in rows
        ]

    async def stuck(
        self, key: str, since: datetime, before: datetime, unfinished_before: datetime | None = None
    ) -> int:
        """Candidate-arm predictions of route ``key`` created from ``since`` on that are
        stuck (docs/canary.md, "A candidate that never takes the work"): created by
        ``before``, still not submitted, and their last submit failed; or, with
        ``unfinished_before``, created by then, taken by the candidate and still not
        finished. Not counted: one never tried (``raw_status`` None: waiting for a slot
        under the provider's ``max_concurrency``) or last told ``busy`` (the provider at
        capacity, the dispatcher's ``_defer``)."""
        not_taken = sa.and_(
            jobs.c.state.in_(_UNSUBMITTED),
            jobs.c.submitted_at.is_(None),
            jobs.c.raw_status.is_not(None),
            jobs.c.raw_status != "busy",
            jobs.c.created_at <= before,
        )
        either: sa.ColumnElement[bool] = not_taken
        if unfinished_before is not None:
            either = sa.or_(not_taken, sa.and_(
                jobs.c.state.in_(ACTIVE),
                jobs.c.submitted_at.is_not(None),
                jobs.c.created_at <= unfinished_before,
            ))
        query = sa.select(sa.func.count()).where(
            jobs.c.route == key,
            jobs.c.arm == "candidate",
            jobs.c.created_at >= since,
            either,
        )
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def _row(self, conn: Connection, key: str, lock: bool = False) -> Any:
        query = sa.select(routes).where(routes.c.key == key)
        if lock:
            query = query.with_for_update()
        return (await conn.execute(query)).first()

    async def _audit(
        self,
        conn: Connection,
        key: str,
        who: str,
        action: str,
        before: RouteSpec | None,
        after: RouteSpec,
        reason: str,
        evidence: dict[str, Any] | None = None,
    ) -> AuditEntry:
        values = {
            "route": key,
            "at": self._clock.now(),
            "who": who[:128],
            "action": action,
            "before": before.stored() if before is not None else None,
            "after": after.stored(),
            "reason": reason,
            "evidence": evidence,
        }
        result = await conn.execute(route_changes.insert().values(**values))
        primary = result.inserted_primary_key
        assert primary is not None  # an insert of one row
        return AuditEntry(id=int(primary[0]), **values)


def _problem(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "invalid route change: " + "; ".join(parts)
