"""``job_lease_lost`` means a lost lease (docs/lifecycle.md, "Leases during an apply"):
a renewal of an apply lease that fires just after the apply finished the job (the
finish releases the lease; the timer stops only when the apply's body returns) says
nothing, while a lease that ran out and was taken by another process, or that process
finished the job, is still logged. Both backends; renewals every 5 ms.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from contracts.job import JobState
from gateway.store import heartbeat
from gateway.store.records import Outcome
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

LEASE_S = 5.0  # tests/support/gateway.py settings_dict: gateway.lease_s
RENEWALS = 1000  # lease_s / 1000: a renewal every 5 ms


@pytest.fixture(autouse=True)
def fast_renewals(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(heartbeat, "RENEWALS_PER_LEASE", RENEWALS)
    caplog.set_level(logging.INFO)


async def submitted(gateway: GatewayHarness) -> str:
    """A prediction submitted to the fake provider, its dispatcher's lease released."""
    job_id = str((await gateway.create({"version": VERSION, "input": {"prompt": "x"}}))["id"])
    await gateway.settle()
    return job_id


def lost(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "job_lease_lost"]


async def renewals_fire() -> None:
    await asyncio.sleep(LEASE_S / RENEWALS * 10)  # ten renewal periods


async def write(gateway: GatewayHarness, job_id: str, **values: Any) -> None:
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))


DONE = Outcome(state=JobState.COMPLETED, raw_status="succeeded", output="done")


async def test_a_renewal_after_the_apply_finished_the_job_logs_nothing(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await submitted(gateway)
    async with gateway.store.applying(job_id, claimed=False) as held:  # the reaper's
        assert held
        assert await gateway.store.finish(job_id, DONE) is not None
        await renewals_fire()  # the body has not returned yet: the timer still runs
    assert (await gateway.get(job_id))["status"] == "succeeded"
    assert lost(caplog) == []


@pytest.mark.parametrize("then", ["held by another", "finished by another"])
async def test_a_lease_that_ran_out_and_was_taken_is_still_logged(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture, then: str
) -> None:
    job_id = await submitted(gateway)
    other = "other-pod-5c9b7d8f64-b7r4m:1:0a1b2c3d"
    async with gateway.store.applying(job_id, claimed=False) as held:
        assert held
        gateway.clock.advance(LEASE_S + 1)  # its renewals failed for a lease: it ran out
        if then == "held by another":  # another process claimed it
            await write(gateway, job_id, lease_owner=other, leased_until=gateway.clock.now())
        else:  # and finished it (the finish releases its lease)
            await write(gateway, job_id, lease_owner=None, leased_until=None,
                        state=JobState.COMPLETED.value)
        await renewals_fire()
    assert [r.job_id for r in lost(caplog)] == [job_id]  # type: ignore[attr-defined]
