"""Completed rows handed straight to the running deliverer, on every backend
(gateway/store/handoff.py): written leased with their first attempt counted, sent without
a claim; never past a pending row of the same prediction or to a disabled endpoint; and
a row whose process died before sending it goes out after its lease, same webhook-id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from contracts.job import JobState
from gateway.app import OWNER
from gateway.http import keys
from gateway.notify import LoopName
from gateway.store.handoff import Handoff
from gateway.store.jobs import JobStore, Outcome
from gateway.store.outbox import Planner
from gateway.store.schema import endpoints, outbox
from gateway.webhooks.delivery import Delivery
from tests.support.outbox import delivery_loop, events_loop, outbox_rows, start_job
from tests.support.receiver import Receiver, Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


@asynccontextmanager
async def running(loop: Delivery) -> AsyncIterator[None]:
    """The delivery loop's ``run()``, as a gateway runs it (hand-offs need it running)."""
    task = asyncio.create_task(loop.run())
    try:
        yield
    finally:
        loop.stop()
        await asyncio.wait_for(task, 10)


async def complete(gateway: Any, job_id: str) -> None:
    assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
    while await events_loop(gateway).run_once():
        pass


def claims_seen(gateway: Any) -> list[str]:
    """Records the delivery claim's query (the one that reads ``completed_sent``)."""
    seen: list[str] = []

    @event.listens_for(gateway.store.engine.sync_engine, "before_cursor_execute")
    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "completed_sent" in statement:
            seen.append(statement)

    return seen


async def test_a_completed_row_goes_to_the_deliverer_without_a_claim(
    make_gateway: Any, receiver: Receiver, backend: str
) -> None:
    gateway = await make_gateway()
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    claims = claims_seen(gateway)
    async with running(delivery_loop(gateway)):
        await complete(gateway, job_id)
        (got,) = await receiver.wait_for(1)
    assert got.payload["id"] == job_id and got.payload["status"] == "succeeded"
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.lease_owner) == ("delivered", 1, None)
    assert row.msg_id == got.webhook_id
    if backend == "sqlite":  # PostgreSQL has no lock-free check first: its claims find nothing
        assert claims == []


async def test_a_completed_row_waits_behind_a_pending_row_of_its_prediction(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway()
    job_id = await start_job(gateway, receiver.url(), ["start", "completed"])
    assert await gateway.deliver(job_id, JobState.RUNNING) == 200
    while await events_loop(gateway).run_once():
        pass
    engine = gateway.store.engine
    (start,) = await outbox_rows(engine, job_id)
    in_flight = {"lease_owner": "another-process", "attempts": 1,
                 "leased_until": gateway.clock.now() + timedelta(seconds=60)}
    async with engine.begin() as conn:  # its start event is being sent by another process
        await conn.execute(outbox.update().where(outbox.c.id == start.id).values(**in_flight))
    async with running(delivery_loop(gateway)):
        await complete(gateway, job_id)
        _, completed = await outbox_rows(engine, job_id)
        assert (completed.event, completed.lease_owner) == ("completed", None)
        assert completed.attempts == 0
        async with engine.begin() as conn:  # the other process got its answer
            await conn.execute(
                outbox.update().where(outbox.c.id == start.id)
                .values(status="delivered", lease_owner=None, leased_until=None)
            )
        gateway.app[keys.NOTIFIER].wake(LoopName.DELIVERY)
        (got,) = await receiver.wait_for(1)
    assert got.payload["status"] == "succeeded"


async def test_a_disabled_endpoint_gets_nothing_handed(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway()
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    engine = gateway.store.engine
    async with engine.begin() as conn:
        await conn.execute(
            endpoints.insert().values(url=receiver.url(), disabled_at=gateway.clock.now(),
                                      reason="the endpoint answered 410 Gone")
        )
    async with running(delivery_loop(gateway)):
        await complete(gateway, job_id)
        (row,) = await outbox_rows(engine, job_id)
        assert (row.lease_owner, row.attempts) == (None, 0)
    await gateway.settle()
    (row,) = await outbox_rows(engine, job_id)
    assert row.status == "dead" and receiver.received == []


class Died:
    """A deliverer whose process dies between the commit and the send."""

    def reserve(self, url: str) -> bool:
        return True

    def unreserve(self, url: str) -> None:
        raise AssertionError("the transaction committed")

    def hand(self, rows: list[Any]) -> None:
        self.rows = rows


def store_handing_to(gateway: Any, deliverer: Any) -> JobStore:
    """A job store of the gateway's process whose new completed rows go to ``deliverer``."""
    settings, owner = gateway.app[keys.SETTINGS], gateway.app[OWNER]
    planner = Planner(
        base_url=settings.gateway.public_url, throttle_s=settings.webhooks.throttle_s,
        stream_secret=gateway.app[keys.SIGNING_SECRET],
        handoff=Handoff(deliverer, owner=owner, lease_s=30),
    )
    return JobStore(gateway.store.engine, planner=planner, owner=owner,
                    lease_s=settings.gateway.lease_s, clock=gateway.clock)


async def test_a_handed_row_whose_process_died_is_sent_after_its_lease(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway()
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    died = Died()
    store = store_handing_to(gateway, died)
    try:
        assert await store.finish(job_id, Outcome(JobState.COMPLETED, "succeeded", "done"))
    finally:
        store.fast_reads.close()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert [r.id for r in died.rows] == [row.id] and died.rows[0].msg_id == row.msg_id
    assert (row.status, row.lease_owner, row.attempts) == ("pending", gateway.app[OWNER], 1)
    assert await delivery_loop(gateway).run_once() == 0  # still leased: nobody sends it
    gateway.clock.advance(31)
    await gateway.settle()
    (got,) = await receiver.wait_for(1)
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert got.webhook_id == row.msg_id and (row.status, row.attempts) == ("delivered", 2)


class SteadyLoad:
    """Eight delivery slots; each receiving path holds its request until released."""

    def __init__(self, gateway: Any, receiver: Receiver) -> None:
        self.gateway, self.receiver = gateway, receiver
        self.gates: dict[str, asyncio.Event] = {}
        self.failing = {"/retried"}  # answered 503 once
        receiver.decide = self.reply

    def reply(self, request: Any) -> Reply:
        if request.path in self.failing:
            self.failing.discard(request.path)
            return Reply(503)
        return Reply(gate=self.gates.setdefault(request.path, asyncio.Event()))

    async def rounds(self, held: list[str], coming: list[str]) -> None:
        """Each round one held attempt ends, then one more completion comes."""
        for n, job_id in enumerate(coming):
            self.gates[f"/h{n}"].set()

            async def ended(job: str = held[n]) -> bool:
                (row,) = await outbox_rows(self.gateway.store.engine, job)
                return row.status == "delivered"

            await wait_until(ended, 10, what="an attempt ended")
            await complete(self.gateway, job_id)

    async def sent_before(self, path: str, newest: str, times: int = 1) -> None:
        """The row that waited (to ``path``, its ``times``-th attempt) was sent before the
        newest completion's row (to ``newest``)."""

        def attempts() -> list[str] | None:
            paths = [r.path for r in self.receiver.received]
            return paths if paths.count(path) >= times else None

        paths = await wait_until(attempts, 30, what=f"the row waiting in the store ({path})")
        self.receiver.decide = None  # the receiver answers at once again: the loop can stop
        for gate in self.gates.values():
            gate.set()
        waited = [i for i, p in enumerate(paths) if p == path][times - 1]
        assert newest not in paths[:waited], paths


async def test_rows_waiting_in_the_store_are_not_starved_by_rows_handed_over(
    make_gateway: Any, receiver: Receiver
) -> None:
    """Eight slots, every attempt held by its receiver: the ninth completed row waits in
    the store. Each time one attempt ends, a newer completion comes: it must not take the
    freed slot ahead of the waiting row for as long as the load lasts."""
    gateway = await make_gateway(webhooks={"max_concurrency": 8, "max_per_host": 16})
    load = SteadyLoad(gateway, receiver)
    job_ids = [await start_job(gateway, receiver.url(f"/h{n}"), ["completed"]) for n in range(12)]
    async with running(delivery_loop(gateway)):
        for job_id in job_ids[:8]:
            await complete(gateway, job_id)
        await receiver.wait_for(8)
        await complete(gateway, job_ids[8])  # no free slot: it waits in the store
        (waiting,) = await outbox_rows(gateway.store.engine, job_ids[8])
        assert (waiting.attempts, waiting.lease_owner) == (0, None)
        await load.rounds(job_ids[:8], job_ids[9:])
        await load.sent_before("/h8", "/h11")


async def test_a_due_retry_is_not_starved_by_rows_handed_over(
    make_gateway: Any, receiver: Receiver
) -> None:
    """A row whose first attempt failed is due again while all eight slots are busy; each
    time one attempt ends a newer completion comes, and never finds the slots full."""
    gateway = await make_gateway(
        webhooks={"max_concurrency": 8, "max_per_host": 16, "retry_delays_s": [1.0] * 5}
    )
    load = SteadyLoad(gateway, receiver)
    retried = await start_job(gateway, receiver.url("/retried"), ["completed"])
    job_ids = [await start_job(gateway, receiver.url(f"/h{n}"), ["completed"]) for n in range(11)]
    async with running(delivery_loop(gateway)):
        await complete(gateway, retried)
        await receiver.wait_for(1)  # 503: it will be tried again in 1 s
        for job_id in job_ids[:8]:
            await complete(gateway, job_id)
        await receiver.wait_for(9)
        gateway.clock.advance(2)  # the retry is due, every slot busy
        await load.rounds(job_ids[:8], job_ids[8:])
        await load.sent_before("/retried", "/h10", times=2)


async def test_a_due_retry_of_another_process_is_not_starved_by_rows_handed_over(
    make_gateway: Any, receiver: Receiver
) -> None:
    """As above, but the retry was scheduled by another process: this one learns of it only
    from the store (Delivery.STORE_EVERY_S), not from an outcome it recorded itself."""
    gateway = await make_gateway(webhooks={"max_concurrency": 8, "max_per_host": 16})
    load = SteadyLoad(gateway, receiver)
    other = await start_job(gateway, receiver.url("/other"), ["completed"])
    job_ids = [await start_job(gateway, receiver.url(f"/h{n}"), ["completed"]) for n in range(11)]
    await complete(gateway, other)  # the deliverer is not running: the row waits unleased
    engine = gateway.store.engine
    failed_once = {"attempts": 1, "next_attempt_at": gateway.clock.now() + timedelta(seconds=1)}
    async with engine.begin() as conn:  # another process tried it; 503, again in 1 s
        await conn.execute(outbox.update().where(outbox.c.job_id == other).values(**failed_once))
    async with running(delivery_loop(gateway)):
        for job_id in job_ids[:8]:
            await complete(gateway, job_id)
        await receiver.wait_for(8)
        gateway.clock.advance(2)  # the other process's retry is due, every slot busy
        await load.rounds(job_ids[:8], job_ids[8:])
        await load.sent_before("/other", "/h10")


async def test_a_row_handed_over_as_the_deliverer_stops_goes_to_the_next_process_at_once(
    make_gateway: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await make_gateway()
    job_id = await start_job(first, receiver.url(), ["completed"])
    loop, committed = delivery_loop(first), []
    monkeypatch.setattr(loop, "hand", committed.append)  # its transaction is slow to commit
    async with running(loop):
        await complete(first, job_id)  # the row is written leased to this process...
    monkeypatch.undo()
    (rows,) = committed
    loop.hand(rows)  # ...and the commit returns once the deliverer has stopped
    (row,) = await outbox_rows(first.store.engine, job_id)
    assert (row.status, row.lease_owner, row.attempts) == ("pending", first.app[OWNER], 1)
    await first.client.close()  # the rest of a graceful stop (a deploy)
    second = await make_gateway()  # the process that replaces it: no wait for a lease
    # read through second: first's engine is disposed (a read there would open a pool
    # nobody closes, its connection left to the garbage collector: a ResourceWarning)
    (row,) = await outbox_rows(second.store.engine, job_id)
    assert (row.lease_owner, row.leased_until, row.attempts) == (None, None, 0)
    await second.settle()
    (got,) = await receiver.wait_for(1)
    (row,) = await outbox_rows(second.store.engine, job_id)
    assert got.webhook_id == row.msg_id and (row.status, row.attempts) == ("delivered", 1)
