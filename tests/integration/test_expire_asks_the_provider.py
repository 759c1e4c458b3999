"""Before the gateway ends a job itself (cancel grace, deadline, lifetime), it asks the
provider once more; a provider that already finished the job decides the outcome.

Found by the chaos run (docs/reliability.md): the app canceled a prediction the provider
had already finished ``succeeded``; the webhook was lost and the polls failed, so after
``cancel_grace_s`` the gateway reported ``canceled``, not the provider's answer.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.errors import UpstreamRetryable
from contracts.job import JobState
from gateway.store.schema import jobs
from tests.support.gateway import VERSION


async def test_a_job_the_provider_finished_is_not_ended_canceled_after_the_grace(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(gateway={"cancel_grace_s": 0.01})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await gateway.settle()  # submitted
    gateway.fake.set_state(job_id, JobState.COMPLETED, output="done")  # its webhook: lost
    later = datetime.now(UTC) + timedelta(hours=1)
    async with gateway.store.engine.begin() as conn:  # and no poll comes before the grace
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(next_attempt_at=later))
    cancel = await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    assert cancel.status == 200
    done = await gateway.wait_for(job_id, "succeeded")
    assert done["output"] == "done"


async def test_a_job_still_running_at_the_provider_ends_canceled_after_the_grace(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(gateway={"cancel_grace_s": 0.01})
    gateway.fake.capabilities = gateway.fake.capabilities.model_copy(update={"cancel": False})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    gateway.fake.set_state(prediction["id"], JobState.RUNNING)  # it ignores cancels
    cancel = await gateway.client.post(
        f"/v1/predictions/{prediction['id']}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    await gateway.wait_for(prediction["id"], "canceled")


async def test_one_failed_ask_after_a_long_outage_does_not_end_the_job(
    make_gateway: Any, monkeypatch: Any,
) -> None:
    # Found by the full-size crash soaks: the gateway was down for most of the time
    # allowed for asking the provider (three cancel graces from the cancel request); after
    # the restart its first ask failed (a 502) and the job was ended canceled at once,
    # while the provider ran it to succeeded. The gateway now gives up only after
    # several failed asks, spaced by ``cancel_resend_s``, as well as the time.
    gateway = await make_gateway(gateway={"cancel_grace_s": 0.01, "cancel_resend_s": 0.05})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await gateway.settle()  # submitted
    gateway.fake.set_state(job_id, JobState.COMPLETED, output="done")  # its webhook: lost
    later = datetime.now(UTC) + timedelta(hours=1)
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    async with gateway.store.engine.begin() as conn:  # canceled before the outage
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(
            next_attempt_at=later, cancel_requested_at=long_ago, cancel_sent_at=long_ago))
    fetch, failed = gateway.fake.fetch, []

    async def fails_once(ref: Any) -> Any:
        if not failed:
            failed.append(ref.provider_job_id)
            raise UpstreamRetryable("fake: fetch answered 502")
        return await fetch(ref)

    monkeypatch.setattr(gateway.fake, "fetch", fails_once)
    done = await gateway.wait_for(job_id, "succeeded")
    assert failed and done["output"] == "done"
