"""A job's lease lasts as long as a terminal apply that copies its outputs
(docs/lifecycle.md, "Leases during an apply"): the poller and the dispatcher's synchronous
submit keep the job leased, renewed, while the output downloads, so another process
neither claims it nor downloads again; and a poll that finds the job finished leaves it
to the provider event that is being applied. Two gateways on one store, a slow output
server the test releases with an event (both backends).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.store import applying as store_applying
from gateway.store.schema import jobs, provider_events
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import delivery_loop, outbox_rows
from tests.support.receiver import Receiver
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

LEASE_S = 5.0  # tests/support/gateway.py settings_dict: gateway.lease_s
FILE_HOSTS = {"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}}


class SlowFiles:
    """Serves ``/{name}`` once :attr:`release` is set, :attr:`delay_s` later; counts the
    requests (downloads), per name in :attr:`counts`."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.delay_s = 0.0
        self.release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/{name}", self._out)
        self.server = TestServer(app, host="127.0.0.1")

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    def url(self, name: str = "out.bin") -> str:
        return str(self.server.make_url(f"/{name}"))

    async def _out(self, request: web.Request) -> web.Response:
        self.counts[request.match_info["name"]] += 1
        await self.release.wait()
        await asyncio.sleep(self.delay_s)
        return web.Response(body=b"output", content_type="application/octet-stream")


@pytest.fixture
async def files() -> AsyncIterator[SlowFiles]:
    server = SlowFiles()
    await server.server.start_server()
    yield server
    server.release.set()
    await server.server.close()


def loop(gateway: GatewayHarness, name: str) -> Any:
    return next(each for each in gateway.app[LOOPS] if each.name == name)


async def job_row(gateway: GatewayHarness, job_id: str) -> sa.Row[Any]:
    async with gateway.store.engine.connect() as conn:
        return (await conn.execute(sa.select(jobs).where(jobs.c.id == job_id))).one()


async def one_job(
    make_gateway: Any, **body: Any
) -> tuple[GatewayHarness, GatewayHarness, str]:
    """Two gateways on one store, and a prediction created (not yet submitted) on the first."""
    first, second = await make_gateway(providers=FILE_HOSTS), await make_gateway(
        providers=FILE_HOSTS
    )
    body = {"version": VERSION, "input": {"prompt": "x"}, **body}
    job_id = str((await first.create(body))["id"])
    return first, second, job_id


def finishes(job_id: str, files: SlowFiles, *gateways: GatewayHarness) -> dict[str, str]:
    """The provider (as each gateway's fake sees it) has finished the job with a file."""
    output = {"file": files.url()}
    for gateway in gateways:
        gateway.fake.set_state(job_id, JobState.COMPLETED, output=output)
    return output


def advance(seconds: float, *gateways: GatewayHarness) -> None:
    for gateway in gateways:
        gateway.clock.advance(seconds)


async def held_past(gateway: GatewayHarness, job_id: str) -> bool:
    """Whether the job's lease (this gateway's) runs past the gateway's now."""
    row = await job_row(gateway, job_id)
    return row.leased_until is not None and row.leased_until > gateway.clock.now()


async def other_poll(gateway: GatewayHarness, files: SlowFiles, name: str = "poller") -> int:
    """One round of ``gateway``'s loop ``name``, failing (not hanging) if it downloads
    again."""
    round_ = asyncio.create_task(loop(gateway, name).run_once())
    await wait_until(lambda: round_.done() or files.requests > 1, what=f"the {name}'s end")
    if not round_.done():
        round_.cancel()
    assert files.requests == 1, f"the {name} downloaded the output again"
    return await round_


async def begun(gateway: GatewayHarness, name: str, files: SlowFiles) -> asyncio.Task[int]:
    """A round of ``gateway``'s loop ``name``, once its output download has begun."""
    round_ = asyncio.create_task(loop(gateway, name).run_once())
    await wait_until(lambda: files.requests == 1, what=f"the {name}'s download began")
    return round_


async def finished_once(
    gateway: GatewayHarness, job_id: str, files: SlowFiles, round_: asyncio.Task[int]
) -> None:
    """Let the download end: the round applied one item, the job succeeded, one download."""
    files.release.set()
    assert await round_ == 1
    assert (await gateway.get(job_id))["status"] == "succeeded"
    assert files.requests == 1


async def outlasts_its_lease(
    first: GatewayHarness, second: GatewayHarness, job_id: str, files: SlowFiles
) -> None:
    """The download outlasts the lease ``first`` holds the job with: renewed meanwhile,
    it keeps ``second``'s poller off the job."""
    advance(LEASE_S + 1, first, second)
    await wait_until(lambda: held_past(first, job_id), what="the lease renewed meanwhile")
    assert await other_poll(second, files) == 0  # nothing for the other process


async def test_a_poll_whose_output_copy_outlasts_the_lease_keeps_it_and_none_downloads_again(
    make_gateway: Any, files: SlowFiles
) -> None:
    first, second, job_id = await one_job(make_gateway)
    await first.settle()  # submitted, queued at the provider
    finishes(job_id, files, first, second)
    advance(10, first, second)  # the next poll is due
    round_ = await begun(first, "poller", files)
    await outlasts_its_lease(first, second, job_id, files)
    await finished_once(first, job_id, files, round_)


async def test_a_synchronous_submits_output_copy_keeps_the_job_from_the_poller(
    make_gateway: Any, files: SlowFiles
) -> None:
    first, second, job_id = await one_job(make_gateway)
    finishes(job_id, files, first, second)  # the submit's answer is already the result
    round_ = await begun(first, "dispatcher", files)
    advance(2, first, second)  # past the first poll the submit set (fetch_interval_s 1 s)
    assert await other_poll(second, files) == 0  # still the dispatcher's
    await outlasts_its_lease(first, second, job_id, files)  # the claim's lease too
    await finished_once(first, job_id, files, round_)


async def test_a_poll_leaves_a_finished_job_to_its_event_being_applied(
    make_gateway: Any, files: SlowFiles
) -> None:
    first, second, job_id = await one_job(make_gateway)
    await first.settle()
    output = finishes(job_id, files, second)
    assert await first.deliver(job_id, JobState.COMPLETED, output=output) == 200
    round_ = await begun(first, "events", files)
    advance(2, first, second)  # the poll the event postponed (fetch_interval_s 1 s) is due
    polls = len(second.fake.fetch_calls)
    assert await other_poll(second, files) == 1  # it found the job finished, left it
    assert len(second.fake.fetch_calls) == polls + 1  # to the event being applied
    await finished_once(first, job_id, files, round_)


async def polled_and_finished(
    make_gateway: Any, files: SlowFiles
) -> tuple[GatewayHarness, GatewayHarness, str, dict[str, str]]:
    """:func:`one_job` submitted (queued at the provider) and then finished with a file
    (:func:`finishes`); the gateways, the job and its output."""
    first, second, job_id = await one_job(make_gateway)
    await first.settle()
    return first, second, job_id, finishes(job_id, files, first, second)


async def applying(
    first: GatewayHarness, second: GatewayHarness, job_id: str, files: SlowFiles, by: str
) -> tuple[asyncio.Task[int], dict[str, str]]:
    """``first``'s ``by`` (poller or dispatcher) applying the job's result, its output
    copy under way; the round and the output."""
    if by == "poller":
        await first.settle()  # submitted, queued at the provider
    output = finishes(job_id, files, first, second)  # the dispatcher's: the submit's answer
    advance(10 if by == "poller" else 0, first, second)  # the next poll is due
    return await begun(first, by, files), output


@pytest.mark.parametrize("arrives_at", ["the applying gateway", "another gateway"])
@pytest.mark.parametrize("by", ["poller", "dispatcher"])
async def test_a_webhook_during_an_applys_output_copy_waits_for_it_and_downloads_nothing(
    make_gateway: Any, files: SlowFiles, by: str, arrives_at: str
) -> None:
    async with Receiver() as app_hooks:
        first, second, job_id = await one_job(
            make_gateway, webhook=app_hooks.url(), webhook_events_filter=["completed"]
        )
        round_, output = await applying(first, second, job_id, files, by)
        receiving = first if arrives_at == "the applying gateway" else second
        assert await receiving.deliver(job_id, JobState.COMPLETED, output=output) == 200
        assert await other_poll(receiving, files, "events") == 1  # taken, put back to wait
        await finished_once(first, job_id, files, round_)
        advance(LEASE_S + 1, first, second)  # past the apply's lease: the event is retried
        assert await loop(receiving, "events").run_once() == 1  # finds the job finished
        assert await unprocessed(first, job_id) == 0
        assert files.requests == 1
        assert await delivery_loop(first).run_once() == 1
        sent = await app_hooks.wait_for(1)
        assert [(r.payload["id"], r.payload["status"]) for r in sent] == [(job_id, "succeeded")]
        rows = await outbox_rows(first.store.engine, job_id)
        assert [row.event for row in rows] == ["completed"]


async def test_a_webhook_applies_once_the_lease_of_a_crashed_apply_has_run_out(
    make_gateway: Any, files: SlowFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, job_id = await one_job(make_gateway)
    round_, output = await applying(first, second, job_id, files, "poller")
    monkeypatch.setattr(store_applying, "give_back", dead)  # a dead process writes nothing
    round_.cancel()  # the process dies mid-copy: its apply lease is renewed no more
    with contextlib.suppress(asyncio.CancelledError):
        await round_
    assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
    assert await other_poll(second, files, "events") == 1  # the lease still runs: it waits
    advance(LEASE_S + 1, first, second)  # it has run out
    files.release.set()
    assert await loop(second, "events").run_once() == 1
    assert (await second.get(job_id))["status"] == "succeeded"
    assert files.requests == 2  # the dead process's copy, then the event's
    assert await unprocessed(second, job_id) == 0


async def dead(*args: Any) -> None:
    """What a process that died does with its apply lease: nothing."""


async def test_an_apply_cancelled_as_the_gateway_stops_gives_its_lease_back(
    make_gateway: Any, files: SlowFiles
) -> None:
    first, second, job_id = await one_job(make_gateway)
    round_, output = await applying(first, second, job_id, files, "poller")
    round_.cancel()  # the gateway stops mid-copy, its loops cancelled (gateway/app.py)
    with contextlib.suppress(asyncio.CancelledError):
        await round_
    row = await job_row(first, job_id)
    assert (row.state, row.lease_owner, row.leased_until) == ("queued", None, None)
    assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
    files.release.set()
    assert await loop(second, "events").run_once() == 1  # applied at once: nothing held
    assert (await second.get(job_id))["status"] == "succeeded"
    assert files.requests == 2  # the stopped apply's copy, then the event's
    assert await unprocessed(second, job_id) == 0


async def test_a_submit_answering_with_the_result_leaves_it_to_the_event_being_applied(
    make_gateway: Any, files: SlowFiles
) -> None:
    first, second, job_id = await one_job(make_gateway)
    output = finishes(job_id, files, first, second)  # the submit's answer: the result
    assert await first.deliver(job_id, JobState.COMPLETED, output=output) == 200
    events = await begun(first, "events", files)  # the webhook overtook the submit
    assert await other_poll(first, files, "dispatcher") == 1  # left to the event
    await finished_once(first, job_id, files, events)
    assert (await job_row(first, job_id)).provider_job_id is not None


async def unprocessed(gateway: GatewayHarness, job_id: str) -> int:
    """How many of the job's provider events are not yet applied."""
    query = sa.select(sa.func.count()).where(
        provider_events.c.job_id == job_id, provider_events.c.processed_at.is_(None)
    )
    async with gateway.store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def test_an_apply_that_fails_hands_the_job_back_and_holds_no_event(
    make_gateway: Any, files: SlowFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, job_id, output = await polled_and_finished(make_gateway, files)
    files.release.set()
    finish = first.store.finish

    async def blip(*args: Any, **kwargs: Any) -> Any:  # the store fails the apply's record
        monkeypatch.setattr(first.store, "finish", finish)
        raise RuntimeError("store blip")

    monkeypatch.setattr(first.store, "finish", blip)
    advance(10, first, second)  # the next poll is due
    assert await loop(first, "poller").run_once() == 1
    row = await job_row(first, job_id)
    assert (row.state, row.lease_owner, row.leased_until) == ("queued", None, None)  # released
    assert row.next_attempt_at is not None  # with its retry's backoff
    assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
    assert await loop(second, "events").run_once() == 1  # applied at once: nothing held
    assert (await second.get(job_id))["status"] == "succeeded"
    assert files.requests == 2  # the failed apply's copy, then the event's


async def test_a_webhook_during_the_reapers_last_ask_waits_for_its_apply(
    make_gateway: Any, files: SlowFiles
) -> None:
    sections = {"providers": FILE_HOSTS, "gateway": {"cancel_grace_s": 1.0}}
    first, second = await make_gateway(**sections), await make_gateway(**sections)
    job_id = str((await first.create({"version": VERSION, "input": {"prompt": "x"}}))["id"])
    await first.settle()  # submitted, queued at the provider
    output = finishes(job_id, files, first, second)  # its webhook lost, no poll yet
    cancel = await first.client.post(f"/v1/predictions/{job_id}/cancel", headers=first.headers)
    assert cancel.status == 200
    advance(2, first, second)  # past the cancel's grace: the reaper asks, and applies
    round_ = await begun(first, "reaper", files)
    assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
    assert await other_poll(second, files, "events") == 1  # taken, put back to wait
    files.release.set()
    await round_
    assert (await first.get(job_id))["status"] == "succeeded"
    advance(LEASE_S + 1, first, second)
    assert await loop(second, "events").run_once() == 1  # finds the job finished
    assert files.requests == 1
    assert await unprocessed(second, job_id) == 0


async def test_an_apply_cancelled_as_its_lease_is_taken_gives_it_back(
    make_gateway: Any, files: SlowFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, job_id, output = await polled_and_finished(make_gateway, files)
    take = store_applying.take

    async def taken_then_cancelled(*args: Any, **kwargs: Any) -> bool:
        await take(*args, **kwargs)  # committed: the job is '+apply:'
        raise asyncio.CancelledError  # the gateway stopping, before the take's await returns

    monkeypatch.setattr(store_applying, "take", taken_then_cancelled)
    advance(10, first, second)  # the next poll is due
    with contextlib.suppress(asyncio.CancelledError):
        await loop(first, "poller").run_once()
    row = await job_row(first, job_id)
    assert (row.state, row.lease_owner, row.leased_until) == ("queued", None, None)
    assert files.requests == 0  # the apply never began
    assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
    files.release.set()
    assert await loop(second, "events").run_once() == 1  # applied at once: nothing held
    assert (await second.get(job_id))["status"] == "succeeded"


async def test_a_failed_apply_wakes_its_waiting_event_at_once(
    make_gateway: Any, files: SlowFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = {"providers": FILE_HOSTS, "gateway": {"lease_s": 60.0}}  # a quarter: 15 s
    gateway = await make_gateway(**sections)
    job_id = str((await gateway.create({"version": VERSION, "input": {"prompt": "x"}}))["id"])
    await gateway.settle()  # submitted, queued at the provider
    output = finishes(job_id, files, gateway)
    finish = gateway.store.finish

    async def blip(*args: Any, **kwargs: Any) -> Any:  # the store fails the apply's record
        monkeypatch.setattr(gateway.store, "finish", finish)
        raise RuntimeError("store blip")

    monkeypatch.setattr(gateway.store, "finish", blip)
    advance(10, gateway)  # the next poll is due
    round_ = await begun(gateway, "poller", files)
    assert await gateway.deliver(job_id, JobState.COMPLETED, output=output) == 200
    events = loop(gateway, "events")
    assert await events.run_once() == 1  # taken, put back to wait for the apply
    running = asyncio.create_task(events.run())  # asleep: the wait is 15 s of its clock
    try:
        files.release.set()  # the copy ends, the record fails: the lease is handed back
        assert await round_ == 1
        await wait_until(lambda: applied(gateway, job_id), 1.0,
                         what="the waiting event applied within 1 s of the hand-back")
        assert (await gateway.get(job_id))["status"] == "succeeded"
    finally:
        events.stop()
        await running


async def applied(gateway: GatewayHarness, job_id: str) -> bool:
    """Whether every provider event of the job is applied."""
    return await unprocessed(gateway, job_id) == 0


async def test_a_submit_answering_with_a_result_that_copies_nothing_finishes_in_one_write(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, job_id = await one_job(make_gateway)
    for gateway in (first, second):  # the submit's answer is the result, with no file
        gateway.fake.set_state(job_id, JobState.COMPLETED, output="done")
    applies: list[str] = []
    taking = store_applying.take

    async def counted(*args: Any, **kwargs: Any) -> bool:
        applies.append(args[1])
        return await taking(*args, **kwargs)

    monkeypatch.setattr(store_applying, "take", counted)
    assert await loop(first, "dispatcher").run_once() == 1
    row = await job_row(first, job_id)
    assert (row.state, row.output) == ("completed", "done")
    assert row.provider_job_id is not None and row.submitted_at is not None
    assert row.started_at is not None and row.lease_owner is None
    assert applies == []  # no apply lease: nothing to copy, one write records it all
    assert await loop(second, "poller").run_once() == 0  # nothing left to poll
