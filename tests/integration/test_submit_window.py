"""A gateway killed between the provider's accept and recording the submit.

Found by the crash soak (docs/reliability.md): a prediction with a ``Cancel-After``
deadline was claimed for dispatch, the provider accepted it, and the gateway was SIGKILLed
before it wrote the provider's id. After the restart the reaper saw an unsubmitted job
past its deadline and ended it ``canceled`` "before it started", without telling the
provider, which ran it to ``succeeded``. A job whose submit may have reached the provider
now goes back to the dispatcher (its submit is idempotent), so the cancel reaches it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest
from gateway.store.claims import SUBMITTING
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness


async def _crash_after_the_provider_accepted(gateway: GatewayHarness, job_id: str) -> None:
    """Claim the job as the dispatcher would, let the provider accept it, then "die"."""
    claimed = await gateway.store.claim_dispatch("fake", 1)
    assert [j.id for j in claimed] == [job_id]
    job = claimed[0]
    await gateway.fake.submit(
        SubmitRequest(job_id=job.id, input=job.input, model=job.model, version=job.version)
    )
    past = datetime.now(UTC) - timedelta(seconds=1)
    async with gateway.store.engine.begin() as conn:  # the dead process's lease runs out
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(leased_until=past))


async def _raw_status(gateway: GatewayHarness, job_id: str) -> str | None:
    async with gateway.store.engine.connect() as conn:
        return (await conn.execute(
            sa.select(jobs.c.raw_status).where(jobs.c.id == job_id)
        )).scalar()


async def test_a_cancel_reaches_a_job_whose_submit_was_never_recorded(
    gateway: GatewayHarness,
) -> None:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    assert await _raw_status(gateway, job_id) == SUBMITTING
    cancel = await gateway.client.post(
        f"/v1/predictions/{job_id}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    done = await gateway.wait_for(job_id, "canceled")
    provider_id = gateway.fake.provider_job_id(job_id)
    assert provider_id in gateway.fake.cancel_calls  # the provider was told
    ref = ProviderRef(job_id=job_id, provider_job_id=provider_id)
    assert (await gateway.fake.fetch(ref)).state is JobState.CANCELED
    assert done["error"] is None


async def test_a_job_never_claimed_is_still_canceled_without_the_provider(
    gateway: GatewayHarness,
) -> None:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    cancel = await gateway.client.post(
        f"/v1/predictions/{prediction['id']}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    await gateway.wait_for(prediction["id"], "canceled")
    assert gateway.fake.submitted == [] and gateway.fake.cancel_calls == []


async def test_the_grace_period_does_not_end_a_job_the_provider_may_have(
    make_gateway: Any,
) -> None:
    # The cancel grace runs out before the dead process's lease does: the job still goes
    # through the dispatcher, not through a local "canceled".
    gateway = await make_gateway(gateway={"cancel_grace_s": 0.01})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    cancel = await gateway.client.post(
        f"/v1/predictions/{job_id}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    await gateway.wait_for(job_id, "canceled")
    assert gateway.fake.provider_job_id(job_id) in gateway.fake.cancel_calls
