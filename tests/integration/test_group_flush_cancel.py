"""A group-commit flusher (gateway/store/engine/group.py) cancelled mid-run (at shutdown): every
caller it was answering, and every caller queued behind it, gets an answer - a 503 the
client may retry (``ServiceUnavailable``), never a result for a commit in doubt, never a
dropped connection; a caller whose item was committed (and answered) before keeps its
answer. docs/reliability.md, "Shutdown and the store"."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.errors import ServiceUnavailable
from contracts.job import JobState
from gateway.http import keys
from gateway.store.engine.group import Group
from gateway.store.schema import provider_events
from tests.integration.test_create_flush_cancel import _jobs_locked
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


@pytest.mark.parametrize("where", ["run", "alone"])
async def test_every_caller_of_a_cancelled_flusher_is_answered(where: str) -> None:
    """In flight: the group in its ``run`` (or retried item by item after it raised);
    queued: an item that arrived meanwhile, and one held back by its key."""
    started = asyncio.Event()
    blocking = True

    async def run(items: list[int]) -> list[int | BaseException]:
        if blocking and where == "alone" and len(items) > 1:
            raise OSError("the group's transaction failed")
        if blocking and not (where == "alone" and items == [1]):
            started.set()
            await asyncio.Event().wait()
        return list(items)  # committed

    group: Group[int, int] = Group("test", run, key=lambda item: item % 10)
    in_flight = [asyncio.create_task(group(n)) for n in (1, 2, 11)]  # 11: 1's key, held back
    await asyncio.wait_for(started.wait(), 5)
    queued = asyncio.create_task(group(3))
    await asyncio.sleep(0)
    assert group.flusher is not None
    group.flusher.cancel()  # as at shutdown
    callers = [*in_flight, queued]
    _, pending = await asyncio.wait(callers, timeout=2)
    assert not pending, "callers left without an answer"
    answers = [c.result() if c.exception() is None else type(c.exception()) for c in callers]
    # 1 retried alone was committed and answered before the cancel: its answer stands
    committed = [1] if where == "alone" else [ServiceUnavailable]
    assert answers == [*committed, ServiceUnavailable, ServiceUnavailable, ServiceUnavailable]
    blocking = False
    assert await asyncio.wait_for(group(4), 2) == 4  # a group whose flusher was cancelled works


async def _webhook(gateway: GatewayHarness, job_id: str) -> Any:
    provider, token = await gateway.store.callback_token(job_id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(job_id, JobState.COMPLETED, output="done")
    return await gateway.client.post(f"/provider-webhooks/{provider}/{job_id}/{token}",
                                     data=body, headers=gateway.fake.sign(body))


async def test_provider_webhooks_whose_flush_is_cancelled_answer_503_and_store_nothing(
    gateway: GatewayHarness, database_url: str,
) -> None:
    """The webhook in the flusher's group and the one queued behind it: 503 problem+json
    with Retry-After (the provider retries), where the connection used to drop."""
    jobs = [(await gateway.create({"version": VERSION, "input": {"n": n}}))["id"]
            for n in (1, 2)]
    await gateway.settle()
    adds = gateway.app[keys.INTAKE]._events._adds

    def flushing(queued: int) -> bool:
        return (adds.flusher is not None and not adds.flusher.done()
                and len(adds._queue) == queued)

    async with _jobs_locked(database_url):
        first = asyncio.create_task(_webhook(gateway, jobs[0]))
        await wait_until(lambda: flushing(0), 5, what="the first webhook's group in flight")
        second = asyncio.create_task(_webhook(gateway, jobs[1]))
        await wait_until(lambda: flushing(1), 5, what="the second webhook queued")
        assert adds.flusher is not None
        adds.flusher.cancel()  # as at shutdown
        responses = await asyncio.wait_for(asyncio.gather(first, second), 5)
    for response in responses:
        assert response.status == 503, await response.text()
        assert response.content_type == "application/problem+json"
        assert response.headers["Retry-After"]
    async with gateway.store.engine.connect() as conn:
        stored = await conn.execute(sa.select(sa.func.count()).select_from(provider_events))
        assert stored.scalar() == 0
    assert (await _webhook(gateway, jobs[0])).status == 200  # the provider's retry
