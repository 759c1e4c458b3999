"""The transactional outbox: which webhook events a job transition causes.

Called by :class:`gateway.store.jobs.JobStore` inside the transaction that changes the job, so
an event exists if and only if its state change was committed (docs/replicate-api.md
§6.2, issue "exactly one completion event"). Delivery lives in :mod:`gateway.webhooks.delivery`.

Rules:

* events are ``start`` (the job started running), ``output`` and ``logs`` (new output or
  logs while running) and ``completed`` (a terminal state); the app's
  ``webhook_events_filter`` is honoured exactly; without one, ``output`` and
  ``completed`` are sent (§6.2 recommendation);
* ``output``/``logs`` are coalesced: while one is still waiting to be sent, the newest
  snapshot replaces its payload, and a new one is not due sooner than ``throttle_s``
  after the previous one of its kind (at most one per 500 ms by default);
* the ``completed`` event supersedes every not-yet-sent non-terminal event of the job,
  so no non-terminal snapshot is ever sent after the terminal one;
* each payload is the full prediction, serialised once, as compact JSON, before the
  transaction that writes it (:meth:`Planner.plan`, then :meth:`Planner.write_many`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from contracts.auth import DEFAULT_TENANT
from contracts.job import Job, JobState
from contracts.replicate import WebhookEvent
from gateway import logs, wire
from gateway.store.engine.aio import Connection
from gateway.store.engine.errors import ValueRefused
from gateway.store.handoff import Handed, Handoff
from gateway.store.records import DeliveryStatus
from gateway.store.schema import outbox

__all__ = ["DEFAULT_EVENTS", "Plan", "Planner", "new_msg_id"]

log = logging.getLogger(__name__)

DEFAULT_EVENTS = (WebhookEvent.OUTPUT, WebhookEvent.COMPLETED)


# The statements every terminal write runs, built once.
_FINISHED: sa.BindParameter[list[str]] = sa.bindparam("finished", expanding=True)
_SUPERSEDE = (
    outbox.update()
    .where(outbox.c.job_id.in_(_FINISHED), outbox.c.status == DeliveryStatus.PENDING)
    .where(outbox.c.attempts == 0)
    .values(status=DeliveryStatus.SUPERSEDED)
)
_INSERT = outbox.insert()
_INSERT_IDS = outbox.insert().returning(outbox.c.msg_id, outbox.c.id)


def new_msg_id() -> str:
    """A Standard Webhooks message id, stable across the retries of one event."""
    return "msg_" + secrets.token_hex(12)


def events_for(old: Job | None, new: Job) -> list[WebhookEvent]:
    """The events the transition ``old -> new`` causes, before the app's filter.

    A terminal transition that brings new output also counts as ``output``: with a filter
    of ``["output"]``, a model whose output only appears at the end still sends one
    webhook, with ``status: "succeeded"`` (§6.2).
    """
    if new.state.terminal:
        if old is not None and new.output is not None and new.output != old.output:
            return [WebhookEvent.COMPLETED, WebhookEvent.OUTPUT]
        return [WebhookEvent.COMPLETED]
    events = []
    if new.state is JobState.RUNNING and (old is None or old.state is not JobState.RUNNING):
        events.append(WebhookEvent.START)
    if old is not None and new.output is not None and new.output != old.output:
        events.append(WebhookEvent.OUTPUT)
    if old is not None and new.logs and new.logs != old.logs:
        events.append(WebhookEvent.LOGS)
    return events


def log_transition(old: Job | None, new: Job) -> None:
    """One ``job_transition`` line (docs/logging.md): ids, route, provider, states and the
    stage timings known so far, in seconds from creation."""
    stages = {
        "submitted_s": new.submitted_at,
        "first_event_s": new.started_at,
        "finalized_s": new.completed_at,
    }
    timings = {
        name: round((at - new.created_at).total_seconds(), 6)
        for name, at in stages.items()
        if at is not None
    }
    logs.info(log, "job_transition", {  # the line handler's direct path (gateway/logs.py)
        "prediction_id": new.id,
        "route": new.route,
        "provider": new.provider,
        "provider_job_id": new.provider_job_id,
        "old_state": old.state.value if old is not None else None,
        "new_state": new.state.value,
        **timings,
    })


@dataclass(frozen=True)
class Plan:
    """The outbox events of one transition and their serialised payload."""

    events: tuple[WebhookEvent, ...] = ()
    payload: str | None = None


class Planner:
    """Writes the outbox rows of a transition.

    Parameters
    ----------
    base_url : str
        The gateway's public URL, for the payload's ``urls``.
    throttle_s : float
        Minimum seconds between two ``output`` (or two ``logs``) events of one job.
    stream_secret : str
        The key of ``urls.stream`` tokens (payloads equal what GET returns): the
        ``default`` tenant's.
    stream_secrets : Mapping[str, str], optional
        Other tenants' keys, by tenant (docs/security.md).
    handoff : Handoff or None
        Where new ``completed`` rows are leased to and handed, after their commit, when
        this process delivers webhooks (:mod:`gateway.store.handoff`); None: they wait
        for the delivery loop's claim.
    """

    def __init__(
        self,
        *,
        base_url: str,
        throttle_s: float,
        stream_secret: str = "",
        stream_secrets: Mapping[str, str] | None = None,
        handoff: Handoff | None = None,
    ) -> None:
        self._base_url = base_url
        self._stream_secrets = {DEFAULT_TENANT: stream_secret, **(stream_secrets or {})}
        self._throttle = timedelta(seconds=throttle_s)
        self.handoff = handoff

    def plan(self, old: Job | None, new: Job) -> Plan:
        """The events ``old -> new`` causes (after the app's filter) and their payload.

        Pure and CPU-bound for a large prediction: the store calls it outside its write
        transaction, on a worker thread.

        Raises
        ------
        ValueRefused
            The prediction cannot be written as the JSON webhooks carry (an integer no
            double can hold, a NaN...).
        """
        if new.webhook is None:
            return Plan()
        wanted = set(new.webhook_events_filter or DEFAULT_EVENTS)
        events = tuple(e for e in events_for(old, new) if e in wanted)
        if not events:
            return Plan()
        try:
            secret = self._stream_secrets.get(new.tenant)
            body = wire.prediction(new, self._base_url, stream_secret=secret)
            payload = wire.compact_json(body.wire()).decode()
        except (ValueError, TypeError) as exc:
            raise ValueRefused(type(exc).__name__, f"not carriable in a webhook: {exc}") from exc
        return Plan(events, payload)

    async def write_many(
        self,
        conn: Connection,
        transitions: list[tuple[Job, Job, Plan]],
        now: datetime,
        handed: Handed | None = None,
    ) -> int:
        """Insert (or coalesce) the planned events of the transitions ``old -> new``;
        return how many rows are new.

        One ``UPDATE`` supersedes what the finished jobs still had waiting, one ``INSERT``
        writes every new ``completed`` and ``start`` event; ``output``/``logs`` events are
        coalesced one by one. Every state change passes here, so it is also where
        ``job_transition`` is logged. With a :attr:`handoff` and ``handed``, the
        ``completed`` rows that can go at once are written leased to this process and
        collected in ``handed`` (:mod:`gateway.store.handoff`: the caller settles it once
        the transaction has ended).
        """
        finished: list[str] = []
        rows: list[dict[str, object]] = []
        coalesced = 0
        for old, new, plan in transitions:
            if old.state is not new.state:
                log_transition(old, new)
            if not plan.events or plan.payload is None:
                continue
            # One snapshot answers every event it triggers; prefer the most specific.
            event = WebhookEvent.COMPLETED
            if event not in plan.events:
                event = next(e for e in WebhookEvent if e in plan.events)
            if event in (WebhookEvent.OUTPUT, WebhookEvent.LOGS):
                coalesced += await self._coalesce(conn, new, event, plan.payload, now)
                continue
            if event is WebhookEvent.COMPLETED:
                finished.append(new.id)
            rows.append(self._row(new, event, plan.payload, now, now))
        if finished:
            await conn.execute(_SUPERSEDE, {"finished": finished})
        leased: list[dict[str, object]] = []
        if rows and self.handoff is not None and handed is not None:
            leased = await self.handoff.lease(conn, rows, now, handed)
        if leased:
            ids = {msg_id: row_id for msg_id, row_id in await conn.execute(_INSERT_IDS, rows)}
            for row in leased:
                row["id"] = ids[row["msg_id"]]
        elif rows:
            await conn.execute(_INSERT, rows)
        return coalesced + len(rows)

    async def _coalesce(
        self, conn: Connection, job: Job, event: WebhookEvent, payload: str, now: datetime
    ) -> int:
        waiting = (
            await conn.execute(
                outbox.update()
                .where(
                    outbox.c.job_id == job.id,
                    outbox.c.event == event,
                    outbox.c.status == DeliveryStatus.PENDING,
                    outbox.c.attempts == 0,
                )
                .values(payload=payload)
                .returning(outbox.c.id)
            )
        ).first()
        if waiting is not None:
            return 0
        last = (
            await conn.execute(
                sa.select(sa.func.max(outbox.c.created_at)).where(
                    outbox.c.job_id == job.id, outbox.c.event == event
                )
            )
        ).scalar()
        due = now if last is None else max(now, last + self._throttle)
        await self._insert(conn, job, event, payload, now, due)
        return 1

    async def _insert(
        self,
        conn: Connection,
        job: Job,
        event: WebhookEvent,
        payload: str,
        now: datetime,
        due: datetime,
    ) -> None:
        await conn.execute(outbox.insert().values(**self._row(job, event, payload, now, due)))

    @staticmethod
    def _row(
        job: Job, event: WebhookEvent, payload: str, now: datetime, due: datetime
    ) -> dict[str, object]:
        return {
            "msg_id": new_msg_id(),
            "job_id": job.id,
            "event": event,
            "url": job.webhook,
            "payload": payload,
            "status": DeliveryStatus.PENDING,
            "attempts": 0,
            "created_at": now,
            "next_attempt_at": due,
        }
