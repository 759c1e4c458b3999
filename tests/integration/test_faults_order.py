"""Issue 6 faults 4-6: jobs only move forward, and limits and guards hold when several
gateway processes share one database (two apps on one database stand for two processes:
each has its own engine, pool, lease owner and loops).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.job import JobState
from contracts.snapshot import ProviderRef
from tests.support.faults import event_rows, loop_named
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import observe, processor_only, start_job
from tests.support.receiver import Receiver
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


def extends(old: Any, new: Any) -> bool:
    return isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old


# --- fault 4 ----------------------------------------------------------------------------


async def test_fault_04_a_late_event_never_moves_output_logs_or_raw_status_back(
    make_gateway: Any, receiver: Receiver
) -> None:
    """Cog posts its webhooks concurrently, so an earlier snapshot may arrive last: it
    must not take output, logs, raw status or state back, nor reach the app."""
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ["output", "completed"])
    await observe(gateway, job_id, JobState.RUNNING, output=["a", "b"], logs="1\n2\n")
    await observe(gateway, job_id, JobState.RUNNING, output=["a"], logs="1\n")  # late
    await observe(gateway, job_id, JobState.QUEUED)  # later still: the first webhook
    job = await gateway.store.get(job_id)
    assert (job.state, job.output, job.logs) == (JobState.RUNNING, ["a", "b"], "1\n2\n")
    assert job.raw_status == "running"
    await gateway.settle()
    await observe(gateway, job_id, JobState.COMPLETED, output=["a", "b", "c"], logs="1\n2\n3\n")
    await gateway.settle()
    outputs = [r.payload["output"] for r in receiver.received]
    assert outputs[-1] == ["a", "b", "c"]
    assert all(extends(old, new) for old, new in itertools.pairwise(outputs)), outputs


# --- fault 5 ----------------------------------------------------------------------------


async def test_fault_05_max_concurrency_holds_across_processes(make_gateway: Any) -> None:
    """Two processes dispatching at once submit no more than ``max_concurrency`` jobs."""
    conf = {"providers": {"fake": {"kind": "fake", "max_concurrency": 2}}}
    one, two = await make_gateway(**conf), await make_gateway(**conf)
    for n in range(6):
        await one.create({"version": VERSION, "input": {"prompt": f"p{n}"}})
    for _ in range(3):
        await asyncio.gather(
            loop_named(one, "dispatcher").run_once(), loop_named(two, "dispatcher").run_once()
        )
    submitted = [r.job_id for r in one.fake.submitted + two.fake.submitted]
    assert len(set(submitted)) == 2, submitted


# --- fault 6 ----------------------------------------------------------------------------


async def test_fault_06_marking_a_cancel_sent_never_touches_a_finished_job(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job finishes while its upstream cancel is in flight: the terminal row stays
    as the finalizer wrote it."""
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await gateway.settle()
    await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    cancel = gateway.fake.cancel
    finished = []

    async def finishes_meanwhile(ref: ProviderRef) -> bool:
        await observe(gateway, job_id, JobState.COMPLETED, output="done anyway")
        finished.append(await gateway.store.get(job_id))
        return await cancel(ref)

    monkeypatch.setattr(gateway.fake, "cancel", finishes_meanwhile)
    await loop_named(gateway, "reaper").run_once()
    job = await gateway.store.get(job_id)
    assert (job.state, job.output) == (JobState.COMPLETED, "done anyway")
    assert job == finished[0]


async def test_fault_06_an_event_is_marked_processed_only_by_its_lease_holder(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A's lease on an event expires and B takes it; when A finishes it must not
    mark the event processed (nor clear B's lease) while B is still applying it."""
    one, two = await make_gateway(), await make_gateway()
    for harness in (one, two):
        processor_only(harness, monkeypatch)
    prediction = await one.create({"version": VERSION, "input": {"prompt": "x"}})
    job_id = prediction["id"]
    await one.settle()
    assert await one.deliver(job_id, JobState.RUNNING, logs="x\n") == 200
    gates = {name: asyncio.Event() for name in ("one", "two")}
    entered: list[str] = []
    for name, harness in (("one", one), ("two", two)):
        monkeypatch.setattr(harness.store, "apply_progress", _gated(harness, name, gates, entered))
    later = loop_named(two, "events")
    lease = later._events._lease_length
    two.clock.advance(lease + timedelta(seconds=1))  # process two's time is past one's lease
    first = asyncio.create_task(loop_named(one, "events").run_once())
    await wait_until(lambda: "one" in entered)
    second = asyncio.create_task(later.run_once())
    await wait_until(lambda: "two" in entered)
    gates["one"].set()
    await first
    (row,) = await event_rows(one)
    try:
        assert row.processed_at is None and row.lease_owner is not None, row
    finally:
        gates["two"].set()
        await second
    (row,) = await event_rows(one)
    assert row.processed_at is not None


def _gated(harness: GatewayHarness, name: str, gates: dict, entered: list) -> Any:
    apply = harness.store.apply_progress

    async def gated(*args: Any, **kwargs: Any) -> Any:
        entered.append(name)
        await gates[name].wait()
        return await apply(*args, **kwargs)

    return gated


async def test_fault_06_two_processes_send_one_cancel(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancels are leased: two processes' reapers send the provider one cancel."""
    one, two = await make_gateway(), await make_gateway()
    prediction = await one.create({"version": VERSION, "input": {"prompt": "x"}})
    await one.settle()
    await one.client.post(f"/v1/predictions/{prediction['id']}/cancel", headers=one.headers)
    calls: list[str] = []
    gate = asyncio.Event()

    async def slow_cancel(ref: ProviderRef) -> bool:
        calls.append(ref.provider_job_id)
        await gate.wait()
        return True

    for harness in (one, two):
        monkeypatch.setattr(harness.fake, "cancel", slow_cancel)
    tasks = [asyncio.create_task(loop_named(h, "reaper").run_once()) for h in (one, two)]
    await wait_until(lambda: len(calls) == 2 or (calls and any(t.done() for t in tasks)))
    gate.set()
    await asyncio.gather(*tasks)
    assert len(calls) == 1, calls
