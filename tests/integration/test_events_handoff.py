"""Provider events handed to this process's event processor in memory, on every backend
(gateway/store/events.py): the row is committed leased to the process that received it;
a process that dies before applying it loses nothing (any process applies it once the
lease has run out, exactly once), a live process never applies its own copy after
another took it, an event is applied with a whole lease that lasts as long as its apply,
a job's later events wait while an earlier one waits for its retry (docs/lifecycle.md,
"Order of a job's provider events"), and no number of unapplied events grows the memory
past MAX_HANDED.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot
from gateway.app import _EVENTS, OWNER
from gateway.retry import Backoff
from gateway.store import events as events_module
from gateway.store.due import Due
from gateway.store.records import ProviderEvent
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import drain, event_rows, events_loop, processor_only
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

LEASE_S = 5.0  # tests/support/gateway.py settings_dict: gateway.lease_s


@pytest.fixture(autouse=True)
def _processor_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here is of the processor's handoff: no webhook is applied as stored."""
    processor_only(None, monkeypatch)


async def queued_job(gateway: GatewayHarness) -> str:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    return str(prediction["id"])


async def received(make_gateway: Any) -> tuple[GatewayHarness, str]:
    """A gateway that has stored (not yet applied) a job's completed provider event."""
    first = await make_gateway()
    job_id = await queued_job(first)
    assert await first.deliver(job_id, JobState.COMPLETED, output="done") == 200
    return first, job_id


async def test_an_event_whose_process_died_is_applied_once_by_another_after_its_lease(
    make_gateway: Any,
) -> None:
    first, job_id = await received(make_gateway)
    (row,) = await event_rows(first)
    assert (row.lease_owner, row.processed_at) == (first.app[OWNER], None)  # committed, held
    # The first process now dies: its in-memory copy is never applied.
    second = await make_gateway()
    assert second.app[OWNER] != first.app[OWNER]
    assert await drain(second) == 0  # still leased to the dead process
    second.clock.advance(LEASE_S + 1)
    assert await drain(second) == 1
    (row,) = await event_rows(second)
    assert row.processed_at is not None and row.lease_owner is None
    assert (await second.get(job_id))["status"] == "succeeded"
    assert await drain(second) == 0  # once


async def test_a_live_process_does_not_apply_its_copy_once_its_lease_has_run_low(
    make_gateway: Any,
) -> None:
    first, _ = await received(make_gateway)
    second = await make_gateway()
    for gateway in (first, second):  # the first was stalled past its lease (a long pause)
        gateway.clock.advance(LEASE_S + 1)
    assert await drain(second) == 1
    assert await drain(first) == 0  # its in-memory copy is too old: left to the store
    (row,) = await event_rows(first)
    assert row.processed_at is not None


async def test_unapplied_events_beyond_max_handed_stay_in_the_store_for_anyone(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "MAX_HANDED", 2)
    first = await make_gateway()
    job_ids = [await queued_job(first) for _ in range(4)]
    for job_id in job_ids:  # nothing applies them yet: a slow or busy processor
        assert await first.deliver(job_id, JobState.COMPLETED, output=job_id) == 200
    assert len(first.app[_EVENTS]._handed) <= 2  # the memory held is bounded
    rows = await event_rows(first)
    assert [r.lease_owner for r in rows].count(first.app[OWNER]) == 2
    second = await make_gateway()
    assert await drain(second) == 2  # the unleased ones, at once, by another process
    assert await drain(first) == 2  # its own two, from memory
    for job_id in job_ids:
        assert (await first.get(job_id))["status"] == "succeeded"
    assert all(r.processed_at is not None for r in await event_rows(first))


async def test_events_left_in_memory_at_a_graceful_stop_go_to_the_next_process_at_once(
    make_gateway: Any,
) -> None:
    first, job_id = await received(make_gateway)
    await first.client.close()  # a graceful stop (a deploy) before its processor got to it
    second = await make_gateway()  # the process that replaces it: no wait for a lease
    (row,) = await event_rows(second)  # not first's: its engine is disposed
    assert (row.lease_owner, row.leased_until, row.processed_at) == (None, None, None)
    assert await drain(second) == 1
    assert (await second.get(job_id))["status"] == "succeeded"


async def test_events_in_the_store_are_not_starved_by_a_steady_stream_of_handed_ones(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, waiting = await received(make_gateway)  # stored by a process that then died
    gateway = await make_gateway()
    monkeypatch.setattr(events_loop(gateway), "_batch", 2)  # every round full (a steady load)
    stream = [await queued_job(gateway) for _ in range(8)]
    gateway.clock.advance(LEASE_S + 1)  # the dead process's lease has run out
    for pair in (stream[n : n + 2] for n in range(0, len(stream), 2)):
        for job_id in pair:  # every round finds a batch of new events in memory
            assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
        await events_loop(gateway).run_once()
        gateway.clock.advance(1.5)
    assert (await gateway.get(waiting))["status"] == "succeeded"  # not left behind
    gateway.clock.advance(LEASE_S)  # what the rounds left in memory grew old: the store's
    await drain(gateway)
    assert [(await gateway.get(j))["status"] for j in stream] == ["succeeded"] * len(stream)


def record_applies(gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ids of the events the gateway's processor applies (or tries to), in order."""
    processor = events_loop(gateway)
    apply, applied = processor._apply, []

    async def recorded(event: ProviderEvent) -> None:
        applied.append(event.id)
        await apply(event)

    monkeypatch.setattr(processor, "_apply", recorded)
    return applied


async def test_an_event_taken_from_memory_is_applied_with_a_whole_lease(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, _ = await received(make_gateway)
    gateway.clock.advance(LEASE_S * 0.4)  # the processor was busy: 60 % of the lease left
    processor, leases = events_loop(gateway), []
    apply = processor._apply

    async def observed(event: ProviderEvent) -> None:
        (row,) = await event_rows(gateway)
        leases.append(row.leased_until)
        await apply(event)

    monkeypatch.setattr(processor, "_apply", observed)
    taken_at = gateway.clock.now()
    assert await drain(gateway) == 1
    (lease_end,) = leases
    assert lease_end >= taken_at + timedelta(seconds=LEASE_S)  # renewed when taken


async def test_an_apply_longer_than_a_lease_keeps_it_and_no_other_process_repeats_it(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, job_id = await received(make_gateway)
    second = await make_gateway()
    processor = events_loop(first)
    apply, started, release = processor._apply, asyncio.Event(), asyncio.Event()

    async def long_apply(event: ProviderEvent) -> None:  # a large output download
        started.set()
        await release.wait()
        await apply(event)

    monkeypatch.setattr(processor, "_apply", long_apply)
    round_ = asyncio.create_task(processor.run_once())
    await wait_until(started.is_set, what="the apply began")
    for gateway in (first, second):  # the apply outlasts the lease it started with
        gateway.clock.advance(LEASE_S + 1)

    async def renewed() -> bool:
        (row,) = await event_rows(first)
        return row.leased_until > first.clock.now()

    await wait_until(renewed, what="the lease renewed while the apply runs")
    assert await drain(second) == 0  # the other process cannot take it meanwhile
    release.set()
    assert await round_ == 1
    (row,) = await event_rows(first)
    assert row.processed_at is not None and row.lease_owner is None
    assert (await first.get(job_id))["status"] == "succeeded"


def fail_first_parse(gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider adapter crashes once (a retryable error) in the processor: that event
    waits 30 s."""
    processor_only(gateway, monkeypatch)
    monkeypatch.setattr(events_loop(gateway), "_backoff", Backoff(30.0, 30.0, jitter=False))
    parse, crashes = gateway.fake.parse_webhook, [RuntimeError("adapter bug")]

    def flaky(body: bytes) -> ProviderSnapshot:
        if crashes:
            raise crashes.pop()
        return parse(body)

    monkeypatch.setattr(gateway.fake, "parse_webhook", flaky)


async def test_a_later_event_of_a_job_waits_while_an_earlier_one_waits_for_its_retry(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = await make_gateway()
    job_id = await queued_job(gateway)
    applied = record_applies(gateway, monkeypatch)
    fail_first_parse(gateway, monkeypatch)
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    assert await events_loop(gateway).run_once() == 1  # tried, put back for a retry
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    await drain(gateway)  # the completion is newer: it waits for the retry
    first, later = (r.id for r in await event_rows(gateway))
    assert applied == [first]
    assert (await gateway.get(job_id))["status"] != "succeeded"
    gateway.clock.advance(60)  # past the retry's backoff
    assert await drain(gateway) == 2
    assert applied == [first, first, later]
    assert (await gateway.get(job_id))["status"] == "succeeded"


async def test_a_later_event_received_by_another_process_waits_for_the_earlier_ones_retry(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await make_gateway()
    job_id = await queued_job(first)
    fail_first_parse(first, monkeypatch)
    assert await first.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    assert await events_loop(first).run_once() == 1  # put back for a retry
    second = await make_gateway()
    applied = record_applies(second, monkeypatch)
    assert await second.deliver(job_id, JobState.COMPLETED, output="done") == 200
    assert await drain(second) == 0  # neither from memory nor from the store
    assert (await second.get(job_id))["status"] != "succeeded"
    second.clock.advance(60)
    assert await drain(second) == 2
    assert applied == [r.id for r in await event_rows(second)]  # in the order stored
    assert (await second.get(job_id))["status"] == "succeeded"


async def test_an_event_held_back_by_a_retry_falls_due_with_the_retry_not_at_once(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle processor sleeps until the retry (gateway/store/due.py), on the lock-free
    reader as on the engine, instead of claiming nothing every loop_interval_s."""
    gateway = await make_gateway()
    job_id = await queued_job(gateway)
    fail_first_parse(gateway, monkeypatch)
    assert await gateway.deliver(job_id, JobState.RUNNING, logs="step 1\n") == 200
    assert await events_loop(gateway).run_once() == 1  # put back for 30 s
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    await drain(gateway)
    first, later = await event_rows(gateway)
    assert later.leased_until is None and later.processed_at is None  # waits unleased
    now, engine = gateway.clock.now(), gateway.store.engine
    for due in (Due(engine), Due(engine, fast=False)):
        assert await due.events(now) == first.leased_until
