"""Issue 6 faults 1-3 and 8 (outage logging): an error in one place decides no more than
its own item, and a transient store error decides nothing at all.

Transient errors come from the driver itself (:class:`tests.support.faults.StoreFaults`):
SQLite's "database is locked", PostgreSQL's deadlock or dropped connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from contracts.errors import UpstreamRetryable
from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot, SubmitRequest
from gateway.app import _FINALIZER
from gateway.boundary import Outage
from tests.support.faults import (
    StoreFaults,
    all_due,
    engine_of,
    loop_named,
    sql,
)
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import processor_only
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

FINISH_COMPLETED = sql(r"^\s*UPDATE jobs SET", state="completed")
PROGRESS_RUNNING = sql(r"^\s*UPDATE jobs SET", state="running")
MARK_PROCESSED = sql(r"^\s*UPDATE provider_events SET (?:(?!WHERE).)*processed_at=")


async def submitted(gateway: GatewayHarness, **input: Any) -> str:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x", **input}})
    await gateway.settle()
    return str(prediction["id"])


async def drain(gateway: GatewayHarness, job_id: str, status: str) -> dict[str, Any]:
    """Run the loops as their ``run()`` would (errors stay inside the round) until the
    prediction reports ``status``."""

    async def rounds() -> dict[str, Any]:
        while True:
            for name in ("dispatcher", "events", "poller", "reaper", "delivery"):
                try:
                    await loop_named(gateway, name).run_once()
                except Exception:  # the loop boundary, as Loop.run has it
                    logging.getLogger("test").exception("round_failed")
            prediction = await gateway.get(job_id)
            if prediction["status"] == status or prediction["status"] in {
                "succeeded", "failed", "canceled"
            }:
                return prediction
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(rounds(), 5)


# --- fault 1 ----------------------------------------------------------------------------


async def test_fault_01_transient_store_error_while_finishing_keeps_the_success(
    gateway: GatewayHarness,
) -> None:
    """A lock, deadlock or dropped connection while recording ``succeeded`` must not
    record ``failed``: the write is retried and the provider's outcome stands."""
    job_id = await submitted(gateway)
    with StoreFaults(engine_of(gateway)).fail(FINISH_COMPLETED, times=2) as faults:
        assert await gateway.deliver(job_id, JobState.COMPLETED, output="the answer") == 200
        done = await drain(gateway, job_id, "succeeded")
    assert done["status"] == "succeeded", done["error"]
    assert done["output"] == "the answer"
    assert faults.raised == 2


# --- fault 2 ----------------------------------------------------------------------------


async def test_fault_02_an_event_that_failed_to_apply_is_applied_later(
    gateway: GatewayHarness,
) -> None:
    """An event whose processing raised is not marked processed: after two injected
    failures it is still applied (the job runs), exactly once."""
    job_id = await submitted(gateway)
    with StoreFaults(engine_of(gateway)).fail(PROGRESS_RUNNING, times=2) as faults:
        assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
        running = await drain(gateway, job_id, "processing")
    assert faults.raised == 2
    assert running["status"] == "processing"
    assert running["logs"] == "step 1\n"


async def test_fault_02_an_adapter_crash_while_parsing_is_retried(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = await submitted(gateway)
    parse = gateway.fake.parse_webhook
    crashes = [RuntimeError("adapter bug"), RuntimeError("adapter bug")]

    def flaky(body: bytes) -> ProviderSnapshot:
        if crashes:
            raise crashes.pop()
        return parse(body)

    monkeypatch.setattr(gateway.fake, "parse_webhook", flaky)
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="ok") == 200
    done = await drain(gateway, job_id, "succeeded")
    assert not crashes
    assert (done["status"], done["output"]) == ("succeeded", "ok")


# --- fault 3 ----------------------------------------------------------------------------


async def test_fault_03_dispatcher_one_failing_cancel_does_not_abort_the_round(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job canceled while its submit was in flight, whose upstream cancel fails, must
    not raise out of the round; its sibling is submitted in the same round."""
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "max_concurrency": 4}})
    doomed = (await gateway.create({"version": VERSION, "input": {"prompt": "a"}}))["id"]
    sibling = (await gateway.create({"version": VERSION, "input": {"prompt": "b"}}))["id"]
    submit = gateway.fake.submit

    async def cancel_in_flight(request: SubmitRequest) -> ProviderSnapshot:
        snapshot = await submit(request)
        if request.job_id == doomed:  # another process ends it while the submit is in flight
            await gateway.store.request_cancel(doomed)
            job = await gateway.store.get(doomed)
            await gateway.app[_FINALIZER].finish_here(job, JobState.CANCELED, None)
        return snapshot

    async def failing_cancel(ref: Any) -> bool:
        raise UpstreamRetryable("the provider is unreachable")

    monkeypatch.setattr(gateway.fake, "submit", cancel_in_flight)
    monkeypatch.setattr(gateway.fake, "cancel", failing_cancel)
    await loop_named(gateway, "dispatcher").run_once()  # must not raise
    assert (await gateway.get(sibling))["status"] == "starting"
    assert (await gateway.store.get(sibling)).provider_job_id == f"fake-{sibling}"


async def test_fault_03_poller_one_failing_job_does_not_abort_the_round(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 4, "fetch_interval_s": 0.01}}
    )
    first, second = [await submitted(gateway, prompt=p) for p in ("a", "b")]
    for job_id in (first, second):
        gateway.fake.set_state(job_id, JobState.RUNNING, logs=f"{job_id}\n")
    poller = loop_named(gateway, "poller")
    await wait_until(lambda: all_due(gateway, first, second))
    with StoreFaults(engine_of(gateway)).fail(PROGRESS_RUNNING, times=1) as faults:
        await poller.run_once()  # must not raise
    assert faults.raised == 1
    states = {(await gateway.get(j))["status"] for j in (first, second)}
    assert "processing" in states  # the sibling's progress was recorded in that round
    for job_id in (first, second):  # the one that failed is polled again soon
        assert (await drain(gateway, job_id, "processing"))["status"] == "processing"


async def test_fault_03_event_processor_one_failing_job_does_not_abort_the_round(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "max_concurrency": 4}})
    processor_only(gateway, monkeypatch)
    first, second = [await submitted(gateway, prompt=p) for p in ("a", "b")]
    for job_id in (first, second):
        assert await gateway.deliver(job_id, JobState.RUNNING, logs="go\n") == 200
    with StoreFaults(engine_of(gateway)).fail(MARK_PROCESSED, times=1) as faults:
        await loop_named(gateway, "events").run_once()  # must not raise
    assert faults.raised == 1
    await drain(gateway, first, "processing")
    await drain(gateway, second, "processing")


# --- fault 8, last item -----------------------------------------------------------------


async def test_fault_08_a_store_outage_logs_once_not_every_round(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """A database outage is logged once (with its traceback), not once per round."""
    poller = loop_named(gateway, "poller")
    poller._interval_s = 0.01
    # retried every 10 ms to 50 ms, not the gateway's 1 s .. 10 s backoff: the outage's
    # rounds, not its pace, are what this test counts (test_outages measures the pace)
    poller._outage = Outage(poller.name, 0.01, max_s=0.05)
    poller.max_idle_s = 0.01  # an idle round after the outage comes at once, not in 10 s
    rounds = {"ok": 0}
    run_once = poller.run_once

    async def counted() -> int:
        handled = await run_once()
        rounds["ok"] += 1
        return handled

    poller.run_once = counted
    caplog.set_level(logging.INFO)
    with StoreFaults(engine_of(gateway)) as faults:
        faults.outage()
        task = asyncio.create_task(poller.run())
        await wait_until(lambda: faults.raised >= 5)
        faults.restore()
        await wait_until(lambda: rounds["ok"] >= 2, timeout_s=30)
        poller.stop()
        await asyncio.wait_for(task, 10)
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.WARNING]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
