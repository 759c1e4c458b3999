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

import pytest
import sqlalchemy as sa

from contracts.errors import UpstreamRetryable, UpstreamUnreachable
from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest
from gateway.app import LOOPS
from gateway.dispatcher import NOT_CONNECTED, REFUSED_RESUBMIT_WAIT_S
from gateway.http import keys
from gateway.store.claims import RESUBMITTING, SUBMITTING
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def _crash_after_the_provider_accepted(
    gateway: GatewayHarness, job_id: str, *, lease_runs_out: bool = True
) -> None:
    """Claim the job as the dispatcher would, let the provider accept it, then "die"
    (and, unless told otherwise, let the dead process's lease run out)."""
    claimed = await gateway.store.claim_dispatch("fake", 1)
    assert [j.id for j in claimed] == [job_id]
    job = claimed[0]
    await gateway.fake.submit(
        SubmitRequest(job_id=job.id, input=job.input, model=job.model, version=job.version)
    )
    if lease_runs_out:
        await _lease_runs_out(gateway, job_id)


async def _lease_runs_out(gateway: GatewayHarness, job_id: str) -> None:
    """The dead process's lease on ``job_id`` runs out: the app's clock moves past it."""
    gateway.clock.advance(gateway.store._lease_length + timedelta(seconds=1))


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


async def _running_before_the_lease_ran_out(gateway: GatewayHarness, job_id: str) -> None:
    """The provider's "running" webhook is applied while the dead process still holds
    the dispatch lease (so no resubmit learns the provider's id); then the lease ends."""
    await _crash_after_the_provider_accepted(gateway, job_id, lease_runs_out=False)
    assert await gateway.deliver(job_id, JobState.RUNNING) == 200
    await gateway.settle()
    assert (await gateway.get(job_id))["status"] == "processing"
    await _lease_runs_out(gateway, job_id)


async def test_a_job_the_provider_reports_running_before_its_submit_was_recorded_is_polled(
    gateway: GatewayHarness,
) -> None:
    # Found by the crash soak (docs/reliability.md): the provider's "running" webhook
    # was applied after the gateway died mid-submit; the job went running with no
    # provider id, so no loop took it (the dispatcher takes unsubmitted jobs, the poller
    # submitted ones) and, its terminal webhook lost, it never ended.
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _running_before_the_lease_ran_out(gateway, job_id)
    gateway.fake.set_state(job_id, JobState.COMPLETED, output="done")  # its webhook is lost
    done = await gateway.wait_for(job_id, "succeeded")
    assert done["output"] == "done"
    assert gateway.fake.provider_job_id(job_id) in gateway.fake.fetch_calls


async def test_a_cancel_reaches_a_job_the_provider_reported_running_before_its_submit(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(gateway={"cancel_grace_s": 0.01})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _running_before_the_lease_ran_out(gateway, job_id)
    cancel = await gateway.client.post(
        f"/v1/predictions/{job_id}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    await gateway.wait_for(job_id, "canceled")
    assert gateway.fake.provider_job_id(job_id) in gateway.fake.cancel_calls


async def test_a_busy_resubmit_does_not_forget_that_the_provider_may_have_the_job(
    gateway: GatewayHarness,
) -> None:
    # Found by the crash soak: after the crash, the resubmit was answered 429 (busy);
    # the job was deferred as "busy", no longer "maybe submitted", so its deadline ended
    # it locally and the provider, which had it from the first submit, ran it to
    # succeeded. The resubmit's busy answer says nothing about the first submit.
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    gateway.fake.busy_times = 1
    cancel = await gateway.client.post(
        f"/v1/predictions/{job_id}/cancel", headers=gateway.headers
    )
    assert cancel.status == 200
    await gateway.wait_for(job_id, "canceled")
    assert gateway.fake.busy_times == 0  # the resubmit was answered busy
    assert gateway.fake.provider_job_id(job_id) in gateway.fake.cancel_calls


async def test_a_job_submitted_past_its_deadline_gets_the_provider_cancel_and_its_grace(
    make_gateway: Any, monkeypatch: Any,
) -> None:
    # Found by the crash soak: a "maybe submitted" job whose deadline passed while the
    # gateway was down was resubmitted; its grace (counted from the deadline) had run
    # out, so the reaper ended it canceled in the round that saw it submitted, before a
    # cancel was ever sent, and the provider ran it to succeeded. The grace now starts
    # no earlier than the submit, so the provider is told first.
    gateway = await make_gateway(gateway={"cancel_grace_s": 2.0})
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    passed = datetime.now(UTC) - timedelta(seconds=5)
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(deadline=passed))
    loops = {loop.name: loop for loop in gateway.app[LOOPS]}
    claim_cancels = gateway.store.claim_cancels

    async def submitted_right_after(*args: Any, **kwargs: Any) -> Any:
        claimed = await claim_cancels(*args, **kwargs)  # nothing: not submitted yet
        await loops["dispatcher"].run_once()  # another process's resubmit lands now
        return claimed

    monkeypatch.setattr(gateway.store, "claim_cancels", submitted_right_after)
    await loops["reaper"].run_once()
    monkeypatch.setattr(gateway.store, "claim_cancels", claim_cancels)
    await gateway.wait_for(job_id, "canceled")
    assert gateway.fake.provider_job_id(job_id) in gateway.fake.cancel_calls


async def test_a_terminal_webhook_before_the_submit_was_recorded_keeps_the_providers_id(
    gateway: GatewayHarness,
) -> None:
    # The provider finished the job and said so before the gateway recorded its submit
    # (it died mid-submit): the job ended with no provider id, so nobody could ask the
    # provider about it (admin API, logs, support) or match its later webhooks.
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id, lease_runs_out=False)
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    done = await gateway.wait_for(job_id, "succeeded")
    assert done["output"] == "done"
    job = await gateway.store.get(job_id)
    assert job.provider_job_id == gateway.fake.provider_job_id(job_id)
    assert len(gateway.fake.submitted) == 1  # the webhook settled it: no resubmit


async def _resubmit_refused(gateway: GatewayHarness) -> str:
    """A job the provider accepted before the "crash", its resubmit refused (4xx)."""
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id: str = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    gateway.fake.reject = True
    await gateway.settle()  # the resubmit, refused
    assert (await gateway.get(job_id))["status"] == "starting"
    return job_id


async def test_a_refused_resubmit_does_not_fail_a_job_the_provider_may_be_running(
    gateway: GatewayHarness,
) -> None:
    # The provider accepted the first submit; the gateway died before recording it and
    # the resubmit was answered 4xx (a duplicate, a rule that changed). The job used to
    # end `failed` at once while the provider ran it; the refusal says nothing about the
    # first submit, so the job stays "maybe submitted" and the provider's word settles it.
    job_id = await _resubmit_refused(gateway)
    assert await _raw_status(gateway, job_id) == RESUBMITTING
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    done = await gateway.wait_for(job_id, "succeeded")
    assert done["output"] == "done"


async def test_a_resubmit_refused_every_time_is_tried_again_then_ends_at_the_lifetime(
    gateway: GatewayHarness,
) -> None:
    job_id = await _resubmit_refused(gateway)
    assert (await gateway.store.get(job_id)).attempts == 1  # one refusal, not a burst
    gateway.clock.advance(timedelta(seconds=REFUSED_RESUBMIT_WAIT_S + 1))
    await gateway.settle()
    assert (await gateway.get(job_id))["status"] == "starting"
    assert (await gateway.store.get(job_id)).attempts == 2
    lifetime_s = gateway.app[keys.SETTINGS].gateway.max_job_lifetime_s
    gateway.clock.advance(timedelta(seconds=lifetime_s))
    done = await gateway.wait_for(job_id, "failed")
    assert "did not accept the prediction" in done["error"]
    assert "resubmitting" in done["error"]


async def test_a_canceled_job_whose_resubmit_is_refused_ends_canceled_at_once(
    gateway: GatewayHarness,
) -> None:
    # It stayed "starting" for max_job_lifetime_s (30 min) and then ended `failed`
    # ("did not accept the prediction"), though the app had canceled it: a refusal
    # leaves nothing at the provider to cancel, and the app asked for `canceled`. The
    # cancel makes the resubmit due at once, not REFUSED_RESUBMIT_WAIT_S after the last.
    job_id = await _resubmit_refused(gateway)
    cancel = await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    assert cancel.status == 200
    await gateway.settle()  # the clock not moved
    done = await gateway.get(job_id)
    assert done["status"] == "canceled" and done["error"] is None
    assert gateway.fake.cancel_calls == []  # no id to cancel: nothing was taken


async def test_a_job_past_its_deadline_whose_resubmit_is_refused_ends_canceled(
    gateway: GatewayHarness,
) -> None:
    job_id = await _resubmit_refused(gateway)
    passed = gateway.clock.now() - timedelta(seconds=1)
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(deadline=passed))
    gateway.clock.advance(timedelta(seconds=REFUSED_RESUBMIT_WAIT_S + 1))
    await gateway.settle()
    done = await gateway.get(job_id)
    assert done["status"] == "canceled"
    assert "passed its deadline" in done["error"] and "before it started" in done["error"]


async def test_a_canceled_job_whose_provider_cannot_be_reached_ends_after_the_grace(
    make_gateway: Any, monkeypatch: Any,
) -> None:
    # The same, with every resubmit failing in transit: tried again at least every
    # cancel_resend_s, it ends `canceled` once the provider had the cancel grace and three
    # tries to take it (and so to be told), not at the maximum lifetime.
    # tries up to a second apart (jittered): settle, which does not wait, stops between them
    gateway = await make_gateway(gateway={
        "cancel_grace_s": 60.0, "cancel_resend_s": 1.0,
        "dispatch_backoff_base_s": 1.0, "dispatch_backoff_max_s": 1.0,
    })
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await _crash_after_the_provider_accepted(gateway, job_id)
    tries: list[str] = []

    async def unreachable(request: SubmitRequest) -> Any:
        tries.append(request.job_id)
        raise UpstreamRetryable("fake: connection refused")

    monkeypatch.setattr(gateway.fake, "submit", unreachable)
    cancel = await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    assert cancel.status == 200
    await gateway.settle()
    assert tries and (await gateway.get(job_id))["status"] == "starting"  # within the grace
    for _ in range(4):  # the clock past the grace, a try (at least) each step
        gateway.clock.advance(timedelta(seconds=20))
        await gateway.settle()
    done = await gateway.get(job_id)
    assert done["status"] == "canceled" and done["error"] is None
    assert len(tries) >= 3


async def test_a_job_whose_submit_found_no_connection_is_canceled_without_the_provider(
    make_gateway: Any, monkeypatch: Any,
) -> None:
    # A refused connection sent nothing, yet the job was kept "maybe submitted"
    # (`unreachable`): a cancel then had it submitted again, starting the work it was to
    # cancel, or (the provider still away) left it until max_job_lifetime_s.
    gateway = await make_gateway(  # tries up to a second apart (see above)
        gateway={"dispatch_backoff_base_s": 1.0, "dispatch_backoff_max_s": 1.0})
    tries: list[str] = []

    async def refused(request: SubmitRequest) -> Any:
        tries.append(request.job_id)
        raise UpstreamUnreachable("fake: submit: cannot connect (ConnectError)")

    monkeypatch.setattr(gateway.fake, "submit", refused)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await gateway.settle()
    assert tries and await _raw_status(gateway, job_id) == NOT_CONNECTED
    cancel = await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    assert cancel.status == 200
    done = await gateway.wait_for(job_id, "canceled")  # at once, not after cancel_grace_s
    assert done["error"] is None
    assert gateway.fake.cancel_calls == []
