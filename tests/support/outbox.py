"""Helpers for webhook tests: read the outbox, move time, drive one job through events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.http import keys
from gateway.intake import Intake
from gateway.store.engine.aio import Engine
from gateway.store.schema import outbox, provider_events
from gateway.webhooks.delivery import Delivery
from tests.support.gateway import VERSION, GatewayHarness

__all__ = [
    "delivery_loop", "drain", "event_rows", "events_loop", "make_due", "observe", "outbox_rows",
    "queued_job", "start_job",
]


async def outbox_rows(engine: Engine, job_id: str | None = None) -> list[sa.Row[Any]]:
    """Every outbox row (of one job), by id."""
    query = sa.select(outbox).order_by(outbox.c.id)
    if job_id is not None:
        query = query.where(outbox.c.job_id == job_id)
    async with engine.connect() as conn:
        return list((await conn.execute(query)).all())


async def event_rows(gateway: GatewayHarness, job_id: str | None = None) -> list[sa.Row[Any]]:
    """Every stored provider event (of one job), by id."""
    query = sa.select(provider_events).order_by(provider_events.c.id)
    if job_id is not None:
        query = query.where(provider_events.c.job_id == job_id)
    async with gateway.store.engine.connect() as conn:
        return list((await conn.execute(query)).all())


async def queued_job(gateway: GatewayHarness) -> str:
    """A created prediction, submitted to the fake provider: its id."""
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    return str(prediction["id"])


async def drain(gateway: GatewayHarness) -> int:
    """Event processor rounds until one applies nothing; how many events they applied."""
    applied = 0
    while n := await events_loop(gateway).run_once():
        applied += n
    return applied


async def make_due(engine: Engine) -> int:
    """Make every pending row due now (instead of sleeping through its backoff)."""
    past = datetime.now(UTC) - timedelta(seconds=1)
    async with engine.begin() as conn:
        result = await conn.execute(
            outbox.update().where(outbox.c.status == "pending").values(next_attempt_at=past)
        )
    return int(result.rowcount)


def delivery_loop(gateway: GatewayHarness) -> Delivery:
    loop = next(loop for loop in gateway.app[LOOPS] if loop.name == "delivery")
    assert isinstance(loop, Delivery)
    return loop


def events_loop(gateway: GatewayHarness) -> Any:
    return next(loop for loop in gateway.app[LOOPS] if loop.name == "events")


def processor_only(gateway: GatewayHarness | None, monkeypatch: Any) -> None:
    """Every provider webhook of ``gateway`` (None: of every gateway) stored for its event
    processor, none applied in the transaction that stores it (gateway/store/applied.py,
    gateway/store/pgapplied.py): for the tests of the processor's own rules (retries,
    leases, marks, its handoff), which that path would otherwise pass by."""

    async def stored_only(*args: Any) -> None:
        return None

    target = Intake if gateway is None else gateway.app[keys.INTAKE]
    monkeypatch.setattr(target, "_applying", stored_only)


async def start_job(
    gateway: GatewayHarness, webhook: str, events: list[str] | None = None, **input: Any
) -> str:
    """Create a prediction with a webhook, submit it to the fake provider; its id."""
    body: dict[str, Any] = {"version": VERSION, "input": {"prompt": "hi", **input}}
    body["webhook"] = webhook
    if events is not None:
        body["webhook_events_filter"] = events
    prediction = await gateway.create(body)
    await gateway.settle()
    return str(prediction["id"])


async def observe(gateway: GatewayHarness, job_id: str, state: JobState, **fields: Any) -> None:
    """The fake provider reports ``state``; the events loop applies it (nothing is sent)."""
    assert await gateway.deliver(job_id, state, **fields) == 200
    while await events_loop(gateway).run_once():
        pass
