"""The prediction lifecycle through the API, with a fake provider, on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_create_is_stored_before_dispatch_and_reported_starting(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    assert prediction["status"] == "starting"
    job = await gateway.store.get(prediction["id"])
    assert job.state is JobState.CREATING and gateway.fake.submitted == []
    await gateway.settle()
    assert [r.job_id for r in gateway.fake.submitted] == [prediction["id"]]
    assert (await gateway.store.get(prediction["id"])).state is JobState.QUEUED


async def test_webhook_drives_the_job_to_succeeded(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    assert await gateway.deliver(prediction["id"], JobState.RUNNING, logs="step 1\n") == 200
    await gateway.settle()
    running = await gateway.get(prediction["id"])
    assert running["status"] == "processing" and running["started_at"]
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output="HI") == 200
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "HI" and done["completed_at"]
    assert done["metrics"]["predict_time"] >= 0


async def test_poll_finishes_a_job_whose_webhook_was_lost(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    gateway.fake.set_state(prediction["id"], JobState.COMPLETED, output="polled")
    created_at = (await gateway.store.get(prediction["id"])).created_at
    await gateway.store.release(prediction["id"], next_attempt_at=created_at)  # due now
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "polled"


async def test_busy_provider_keeps_the_job_queued_then_runs_it(make_gateway):
    gateway = await make_gateway()
    gateway.fake.busy_times = 2
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    dispatcher = next(loop for loop in gateway.app[LOOPS] if loop.name == "dispatcher")
    assert await dispatcher.run_once() == 1
    job = await gateway.store.get(prediction["id"])
    assert job.state is JobState.QUEUED and job.submitted_at is None and job.attempts == 1
    assert (await gateway.get(prediction["id"]))["status"] == "starting"

    async def submitted() -> None:
        while not gateway.fake.submitted:
            await gateway.settle()
            await asyncio.sleep(0.01)

    await asyncio.wait_for(submitted(), 10)
    job = await gateway.store.get(prediction["id"])
    assert job.submitted_at is not None and job.attempts == 2


async def _dispatched(gateway: GatewayHarness, job_id: str, done: Any) -> None:
    """Settle (the backoff is the harness's 10-50 ms) until ``done(job)``."""

    async def reached() -> bool:
        await gateway.settle()
        return bool(done(await gateway.store.get(job_id)))

    await wait_until(reached, 10.0, what=f"job {job_id} dispatched")


async def test_busy_answers_do_not_count_toward_the_crash_limit(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job the provider sent back busy seven times (Cog's 409 "At capacity", each a
    deferral that counts in ``attempts`` for the backoff) failed at its first crashed
    submit: the limit of 8 counted every deferral, not the crashes."""
    gateway = await make_gateway()
    gateway.fake.busy_times = 7
    submit, crashes = gateway.fake.submit, [RuntimeError("adapter bug")]

    async def crashing_once(request: Any) -> Any:
        if gateway.fake.busy_times == 0 and crashes:
            raise crashes.pop()
        return await submit(request)

    monkeypatch.setattr(gateway.fake, "submit", crashing_once)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await _dispatched(gateway, prediction["id"], lambda job: job.state.terminal
                      or job.submitted_at is not None)
    job = await gateway.store.get(prediction["id"])
    assert crashes == [] and job.attempts == 8  # seven busy answers, one crash
    assert job.state is JobState.QUEUED and job.submitted_at is not None, job.error


async def test_a_submit_that_always_crashes_fails_the_job_at_the_eighth(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = await make_gateway()
    calls: list[str] = []

    async def crashing(request: Any) -> Any:
        calls.append(request.job_id)
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(gateway.fake, "submit", crashing)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await _dispatched(gateway, prediction["id"], lambda job: job.state.terminal)
    job = await gateway.store.get(prediction["id"])
    assert job.state is JobState.FAILED and len(calls) == 8
    assert job.error == "the prediction could not be sent to the provider (RuntimeError)"


async def test_rejected_submit_fails_the_job_with_the_reason(gateway: GatewayHarness):
    gateway.fake.reject = True
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    done = await gateway.wait_for(prediction["id"], "failed")
    assert "rejected" in done["error"]


async def test_second_terminal_webhook_changes_nothing(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    await gateway.deliver(prediction["id"], JobState.COMPLETED, output="first")
    await gateway.wait_for(prediction["id"], "succeeded")
    assert await gateway.deliver(prediction["id"], JobState.FAILED, error="late") == 200
    await gateway.settle()
    again = await gateway.get(prediction["id"])
    assert again["status"] == "succeeded" and again["output"] == "first"


def loop_named(gateway: GatewayHarness, name: str):  # type: ignore[no-untyped-def]
    return next(loop for loop in gateway.app[LOOPS] if loop.name == name)


NEXT_POLL_S = 10.0  # past the fake's next poll (fetch_interval_s 1 s, with jitter)
NEXT_CANCEL_S = 3.0  # past cancel_resend_s (2 s), short of cancel_grace_s (30 s)


async def test_lost_job_waits_out_the_providers_retry_window_for_its_webhook(
    gateway: GatewayHarness,
):
    gateway.fake.capabilities = gateway.fake.capabilities.model_copy(
        update={"lost_grace_s": 3600.0}
    )
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    gateway.fake.forget(prediction["id"])  # finished upstream, then forgotten
    gateway.clock.advance(NEXT_POLL_S)
    assert await loop_named(gateway, "poller").run_once() == 1
    job = await gateway.store.get(prediction["id"])
    assert job.state is JobState.QUEUED and job.lost_at is not None
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output="late") == 200
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "late"


async def test_lost_job_fails_once_the_retry_window_has_passed(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    gateway.fake.forget(prediction["id"])
    gateway.clock.advance(NEXT_POLL_S)
    done = await gateway.wait_for(prediction["id"], "failed")
    assert "does not know" in done["error"]


async def test_cancel_is_sent_again_until_the_provider_reports_the_end(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    reaper = loop_named(gateway, "reaper")
    response = await gateway.client.post(
        f"/v1/predictions/{prediction['id']}/cancel", headers=gateway.headers
    )
    assert response.status == 200
    await reaper.run_once()
    await reaper.run_once()  # not due again yet
    provider_id = gateway.fake.provider_job_id(prediction["id"])
    assert gateway.fake.cancel_calls == [provider_id]
    gateway.clock.advance(NEXT_CANCEL_S)
    await reaper.run_once()
    assert gateway.fake.cancel_calls == [provider_id, provider_id]
    assert await gateway.deliver(prediction["id"], JobState.CANCELED) == 200
    await gateway.wait_for(prediction["id"], "canceled")
    gateway.clock.advance(NEXT_CANCEL_S)
    await reaper.run_once()
    assert gateway.fake.cancel_calls == [provider_id, provider_id]


async def test_metrics_count_predictions_submits_webhooks_and_outcomes(gateway: GatewayHarness):
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await gateway.deliver(prediction["id"], JobState.COMPLETED, output="X")
    await gateway.wait_for(prediction["id"], "succeeded")
    response = await gateway.client.get("/metrics")  # no token needed
    assert response.status == 200
    text = await response.text()
    route = f"acme/echo:{VERSION}"
    assert f'cutover_predictions_created_total{{provider="fake",route="{route}"}} 1.0' in text
    assert 'cutover_provider_submits_total{outcome="accepted",provider="fake"} 1.0' in text
    assert 'cutover_provider_webhooks_total{outcome="stored",provider="fake"} 1.0' in text
    assert 'cutover_predictions_finished_total{provider="fake",state="completed"} 1.0' in text


async def test_polls_that_learn_nothing_write_nothing_but_the_round_s_release(make_gateway):
    """Many jobs in flight (bench/inflight.py): the poller takes the due ones together,
    writes nothing of a job whose poll brought no news, and hands them back in one write."""
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "max_concurrency": 5}})
    ids = [(await gateway.create({"version": VERSION, "input": {"prompt": f"{i}"}}))["id"]
           for i in range(5)]
    await gateway.settle()

    async def rows() -> dict[str, Any]:
        async with gateway.store.engine.connect() as conn:
            found = await conn.execute(sa.select(jobs).where(jobs.c.id.in_(ids)))
            return {row.id: row for row in found}

    async def due_now(*job_ids: str) -> None:
        past = (await rows())[ids[0]].created_at
        async with gateway.store.engine.begin() as conn:
            await conn.execute(
                jobs.update().where(jobs.c.id.in_(job_ids)).values(next_attempt_at=past)
            )

    await due_now(*ids)
    before = await rows()
    poller = next(loop for loop in gateway.app[LOOPS] if loop.name == "poller")
    assert await poller.run_once() == 5
    assert sorted(gateway.fake.fetch_calls) == sorted(f"fake-{i}" for i in ids)
    for job_id, new in (await rows()).items():
        old = before[job_id]
        assert (new.updated_at, new.state, new.lease_owner) == (old.updated_at, "queued", None)
        assert new.next_attempt_at > old.next_attempt_at  # released, due later
    gateway.fake.set_state(ids[0], JobState.RUNNING, logs="news\n")
    await due_now(ids[0])
    assert await poller.run_once() == 1
    moved = await gateway.store.get(ids[0])
    assert moved.state is JobState.RUNNING and moved.logs == "news\n"
