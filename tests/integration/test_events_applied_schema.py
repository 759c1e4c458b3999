"""A terminal webhook applied as it is stored (SQLite, gateway/intake.py ``_finishing``)
never asks the provider for the route's ``Output`` schema before the webhook is
answered: with the schema not held by this process (a gateway restarted since the
create), the webhook is stored for the event processor, which asks for the schema and
finishes the job after the answer; with the schema held, the fast path still finishes
the job in the storing transaction."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import GatewayHarness
from tests.support.outbox import drain, event_rows, queued_job

DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.2", "info": {"title": "Cog", "version": "0.1.0"}, "paths": {},
    "components": {"schemas": {
        "Input": {"type": "object", "properties": {"prompt": {"type": "string"}}},
        "Output": {"type": "string"}}}}


def sqlite_only(gateway: GatewayHarness) -> None:
    if gateway.store.engine.dialect.name != "sqlite":
        pytest.skip("webhooks are applied as they are stored on SQLite only")


def serve_schema(gateway: GatewayHarness) -> list[str]:
    """Give the fake provider a model schema (what a Cog server's ``/openapi.json`` is to
    :func:`gateway.assembly.schema_fetcher`); the targets it is asked for, in order."""
    asked: list[str] = []

    async def model_schema(target: str) -> dict[str, Any]:
        asked.append(target)
        return DOCUMENT

    gateway.fake.model_schema = model_schema  # type: ignore[attr-defined]
    return asked


async def test_a_terminal_webhook_asks_for_no_schema_before_its_answer(
    make_gateway: Any,
) -> None:
    first: GatewayHarness = await make_gateway()
    sqlite_only(first)
    serve_schema(first)
    job_id = await queued_job(first)  # the create loaded the schema in the first process
    restarted: GatewayHarness = await make_gateway()  # same database, nothing loaded yet
    asked = serve_schema(restarted)
    assert await restarted.deliver(job_id, JobState.COMPLETED, output=["do", "ne"]) == 200
    assert asked == []  # no provider call while the provider waited for its answer
    (row,) = await event_rows(restarted, job_id)
    assert row.processed_at is None  # stored for the processor
    assert (await restarted.store.get(job_id)).state is JobState.QUEUED
    assert await drain(restarted) == 1
    assert len(asked) == 1  # the processor asked, after the answer
    job = await restarted.store.get(job_id)
    assert (job.state, job.output) == (JobState.COMPLETED, "done")  # joined: the schema


async def test_a_terminal_webhook_with_its_schema_held_finishes_as_it_is_stored(
    gateway: GatewayHarness,
) -> None:
    sqlite_only(gateway)
    asked = serve_schema(gateway)
    job_id = await queued_job(gateway)
    assert len(asked) == 1  # the create's
    assert await gateway.deliver(job_id, JobState.COMPLETED, output=["do", "ne"]) == 200
    (row,) = await event_rows(gateway, job_id)
    assert row.processed_at is not None  # applied in the transaction that stored it
    job = await gateway.store.get(job_id)
    assert (job.state, job.output) == (JobState.COMPLETED, "done")
    assert len(asked) == 1 and await drain(gateway) == 0
