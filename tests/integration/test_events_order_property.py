"""A job's provider events are applied in the order they were stored, once each, whatever
two processes sharing a store do in between (docs/lifecycle.md, "Order of a job's provider
events"; gateway/store/events.py), on every backend.

Hypothesis writes the programs: webhooks reaching either process, event rounds in either
(some applies failing once, so the event waits a backoff), and time passing (backoffs and
leases running out). Whenever a processor begins to apply an event, or a webhook is
applied in the transaction that stores it (gateway/store/applied.py, on SQLite), no
earlier event of its job may be unprocessed; at the end, with the time past every backoff
and lease, each event has applied exactly once, by one of the two.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot
from gateway.retry import Backoff
from gateway.store.applied import Stored
from gateway.store.records import ProviderEvent
from gateway.store.schema import provider_events
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import events_loop

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

BACKOFF_S = 5.0  # a failed apply waits this long before its retry
JOBS = 2

steps = st.lists(
    st.one_of(
        st.tuples(st.just("webhook"), st.integers(0, 1), st.integers(0, JOBS - 1)),
        st.tuples(st.just("round"), st.integers(0, 1), st.booleans()),
        st.tuples(st.just("wait"), st.sampled_from([1.0, BACKOFF_S + 1, 60.0])),
    ),
    min_size=1,
    max_size=14,
)


class Processes:
    """Two gateways on one store, their processors observed."""

    def __init__(self, gateways: list[GatewayHarness], monkeypatch: pytest.MonkeyPatch) -> None:
        self.gateways = gateways
        self.out_of_order: list[tuple[int, list[int]]] = []
        self.applied: list[int] = []  # ids of the events whose apply succeeded
        self.as_stored = 0  # of which applied in the transaction that stored them
        self.fail_next = False
        for gateway in gateways:
            self._observe(gateway, monkeypatch)

    def _observe(self, gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch) -> None:
        processor = events_loop(gateway)
        monkeypatch.setattr(processor, "_backoff", Backoff(BACKOFF_S, BACKOFF_S, jitter=False))
        apply, parse = processor._apply, gateway.fake.parse_webhook

        async def observed(event: ProviderEvent) -> None:
            earlier = await self.unprocessed(gateway, event.job_id, before=event.id)
            if earlier:
                self.out_of_order.append((event.id, earlier))
            await apply(event)
            self.applied.append(event.id)

        def flaky(body: bytes) -> ProviderSnapshot:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("adapter bug")  # retryable: the event waits a backoff
            return parse(body)

        events = processor._events
        add_applied = events.add_applied

        async def stored(job_id: str, *args: Any, **kwargs: Any) -> Stored:
            done: Stored = await add_applied(job_id, *args, **kwargs)
            if done.applied:
                assert done.event_id is not None
                earlier = await self.unprocessed(gateway, job_id, before=done.event_id)
                if earlier:
                    self.out_of_order.append((done.event_id, earlier))
                self.applied.append(done.event_id)
                self.as_stored += 1
            return done

        monkeypatch.setattr(processor, "_apply", observed)
        monkeypatch.setattr(events, "add_applied", stored)
        monkeypatch.setattr(gateway.fake, "parse_webhook", flaky)

    @staticmethod
    async def unprocessed(gateway: GatewayHarness, job_id: str, before: int) -> list[int]:
        query = sa.select(provider_events.c.id).where(
            provider_events.c.job_id == job_id,
            provider_events.c.id < before,
            provider_events.c.processed_at.is_(None),
        )
        async with gateway.store.engine.connect() as conn:
            return list((await conn.execute(query)).scalars())

    def wait(self, seconds: float) -> None:
        for gateway in self.gateways:
            gateway.clock.advance(seconds)

    async def drain(self, gateway: GatewayHarness) -> None:
        while await events_loop(gateway).run_once():
            pass


@given(program=steps)
@example(program=[  # a later event in the process whose earlier event waits for its retry
    ("webhook", 0, 0), ("round", 0, True), ("webhook", 0, 0), ("round", 0, False),
])
@example(program=[  # ... or in another process
    ("webhook", 0, 0), ("round", 0, True), ("webhook", 1, 0), ("round", 1, False),
])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
async def test_events_apply_in_order_once_each_whatever_two_processes_do(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch, program: list[tuple[Any, ...]]
) -> None:
    with monkeypatch.context() as patched:
        gateways = [await make_gateway(), await make_gateway()]
        processes = Processes(gateways, patched)
        jobs = []
        for _ in range(JOBS):
            prediction = await gateways[0].create({"version": VERSION, "input": {"p": "x"}})
            jobs.append(str(prediction["id"]))
        await gateways[0].settle()
        sent = 0
        for step in program:
            if step[0] == "webhook":
                _, process, job = step
                sent += 1  # each body differs (so none is a duplicate): the logs grow
                status = await gateways[process].deliver(
                    jobs[job], JobState.RUNNING, logs="".join(f"{n}\n" for n in range(sent))
                )
                assert status == 200
            elif step[0] == "round":
                _, process, fails = step
                processes.fail_next = fails
                await events_loop(gateways[process]).run_once()
                processes.fail_next = False
            else:
                processes.wait(step[1])
        processes.wait(120.0)  # past every backoff and lease
        for gateway in gateways:
            await processes.drain(gateway)
        assert processes.out_of_order == []
        async with gateways[0].store.engine.connect() as conn:
            query = sa.select(provider_events.c.id, provider_events.c.processed_at).where(
                provider_events.c.job_id.in_(jobs)
            )
            rows = (await conn.execute(query)).all()
        assert all(row.processed_at is not None for row in rows)
        assert sorted(processes.applied) == sorted(row.id for row in rows)  # once each
