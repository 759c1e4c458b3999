"""The dispatcher's next-due time counts the jobs it would claim, canceled ones included.

A job whose submit may have reached the provider (``raw_status`` in ``MAYBE_SUBMITTED``)
goes back to the dispatcher even after a cancel request, so the cancel reaches the
provider (docs/reliability.md). ``Due.dispatch`` used to skip every job with a cancel
request, so an idle dispatcher slept up to ``loop_max_idle_s`` before claiming it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.store.claims import SUBMITTING
from tests.integration.test_submit_window import (
    _crash_after_the_provider_accepted,
    _raw_status,
)
from tests.support.faults import loop_named
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_a_canceled_job_the_dispatcher_would_claim_sets_its_next_round(
    gateway: GatewayHarness,
) -> None:
    dispatcher = loop_named(gateway, "dispatcher")
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id, lease_runs_out=False)
    assert await _raw_status(gateway, job_id) == SUBMITTING
    cancel = await gateway.client.post(f"/v1/predictions/{job_id}/cancel",
                                       headers=gateway.headers)
    assert cancel.status == 200
    lease_s = gateway.store._lease_length.total_seconds()
    assert lease_s < dispatcher.max_idle_s
    # Leased by the "dead" process: due when its lease runs out, not loop_max_idle_s later.
    assert await dispatcher.idle_s() <= lease_s
    gateway.clock.advance(timedelta(seconds=lease_s + 1))
    assert await dispatcher.idle_s() == dispatcher._interval_s  # due now: look again soon
    assert [j.id for j in await gateway.store.claim_dispatch("fake", 1)] == [job_id]
