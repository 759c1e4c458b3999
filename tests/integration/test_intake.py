"""Provider webhook intake: stored durably before it is acknowledged."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.http import keys
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_event_that_cannot_be_stored_gets_503_and_a_retry_succeeds(
    gateway: GatewayHarness,
):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    async with gateway.store.engine.begin() as conn:  # a real fault: the table is gone
        await conn.execute(sa.text("ALTER TABLE provider_events RENAME TO provider_events_away"))
    response_status = await gateway.deliver(prediction["id"], JobState.COMPLETED, output="X")
    assert response_status == 503
    async with gateway.store.engine.begin() as conn:
        await conn.execute(sa.text("ALTER TABLE provider_events_away RENAME TO provider_events"))
    assert (await gateway.get(prediction["id"]))["status"] == "starting"
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output="X") == 200
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "X"


async def test_event_is_applied_after_a_restart_when_it_was_stored_but_not_processed(
    make_gateway,
):
    first = await make_gateway()
    prediction = await first.create({"version": VERSION, "input": {"prompt": "x"}})
    await first.settle()
    assert await first.deliver(prediction["id"], JobState.COMPLETED, output="late") == 200
    # No settle: the process "dies" with the event stored but not applied, still leased to
    # it (stored leased for the in-memory hand-over). A second process claims it once that
    # lease has run out: its clock is moved past it rather than the test waiting lease_s
    # of real time inside wait_for's deadline.
    second = await make_gateway()
    second.clock.advance(second.app[keys.SETTINGS].gateway.lease_s)
    done = await second.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "late"
