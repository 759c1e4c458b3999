"""HeldCogAdapter against httpx.MockTransport: the synchronous PUT, the answer window, the
hold, its hand-over, busy answers sent again, cancels and probes (docs/cog.md §3).

The scripted Cog answers each request from an asyncio.Event the test sets, so a prediction
is "running" exactly until the test says it ended; nothing waits on a timer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from adapters import cog_held
from adapters.cog_held import HeldCogAdapter
from contracts.errors import ProviderBusy, UpstreamRejected, UpstreamUnreachable
from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest

BASE = "http://cog.test:5000"
JOB = "held1"
INPUT = {"prompt": "hi"}
DONE = {"id": JOB, "status": "succeeded", "output": "HI", "logs": "step 1/1\n",
        "metrics": {"predict_time": 0.01}}
IN_FLIGHT = {"id": JOB, "input": INPUT, "logs": "step 1/3\n", "status": "processing"}


class Cog:
    """Answers requests in order; a held answer waits for :meth:`finish`."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.answers: list[Callable[[], Any]] = []

    def now(self, status: int, payload: Any) -> None:
        self.answers.append(lambda: httpx.Response(status, json=payload))

    def later(self, status: int, payload: Any) -> asyncio.Event:
        ended = asyncio.Event()

        async def answer() -> httpx.Response:
            await ended.wait()
            return httpx.Response(status, json=payload)

        self.answers.append(answer)
        return ended

    def fails(self, exc: Exception) -> None:
        def answer() -> httpx.Response:
            raise exc
        self.answers.append(answer)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        result = self.answers.pop(0)()
        return await result if asyncio.iscoroutine(result) else result

    def body(self, index: int) -> dict[str, Any]:
        return json.loads(self.requests[index].content)


class Delivered:
    """The gateway's side of :meth:`HeldCogAdapter.attach_answers`."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.fail = False
        self.changed = asyncio.Event()

    async def __call__(self, job_id: str, body: bytes) -> bool:
        if self.fail:
            raise RuntimeError("store down")
        self.answers.append((job_id, json.loads(body)))
        self.changed.set()
        return True

    async def one(self) -> tuple[str, dict[str, Any]]:
        await asyncio.wait_for(self.changed.wait(), 5)
        return self.answers[-1]


@pytest.fixture
async def held(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[HeldCogAdapter, Cog,
                                                                        Delivered]]:
    monkeypatch.setattr(cog_held, "_BUSY_FIRST_S", 0.0)  # sent again at once
    monkeypatch.setattr(cog_held, "DRAIN_S", 0.0)  # a test's unended hold: dropped at close
    cog = Cog()
    adapter = HeldCogAdapter(name="cog", base_url=BASE, transport=httpx.MockTransport(cog))
    delivered = Delivered()
    adapter.attach_answers(delivered)
    yield adapter, cog, delivered
    await adapter.aclose()


def submit_request() -> SubmitRequest:
    return SubmitRequest(job_id=JOB, input=INPUT, model="acme/echo", version="v1")


def ref() -> ProviderRef:
    return ProviderRef(job_id=JOB, provider_job_id=JOB, input=INPUT)


async def until(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0)
    await asyncio.wait_for(poll(), 5)


async def test_held_adapter_asks_for_no_webhook_and_keeps_fetch_and_cancel(held):
    adapter, _, _ = held
    assert adapter.capabilities.webhooks is False
    assert adapter.capabilities.fetch and adapter.capabilities.cancel
    assert adapter.capabilities.lost_grace_s == cog_held.HELD_LOST_GRACE_S


async def test_a_fast_prediction_answers_the_submit_with_its_result(held):
    adapter, cog, delivered = held
    cog.now(200, DONE)
    snapshot = await adapter.submit(submit_request())
    assert snapshot.state is JobState.COMPLETED
    assert snapshot.output == "HI"
    request = cog.requests[0]
    assert request.method == "PUT" and request.url.path == f"/predictions/{JOB}"
    assert "prefer" not in request.headers  # synchronous: Cog answers at the end
    assert cog.body(0) == {"id": JOB, "input": INPUT}  # no webhook, no filter
    assert delivered.answers == []  # the dispatcher applies a submit's own answer


@pytest.mark.parametrize("status", [409, 503, 429])
async def test_busy_within_the_window_raises_provider_busy(held, status):
    adapter, cog, _ = held
    cog.now(status, {"error": "At capacity - all prediction slots busy", "status": "failed"})
    with pytest.raises(ProviderBusy):
        await adapter.submit(submit_request())


async def test_refused_input_within_the_window_is_rejected(held):
    adapter, cog, _ = held
    cog.now(422, {"detail": [{"loc": ["body", "input", "steps"], "msg": "must be >= 0"}]})
    with pytest.raises(UpstreamRejected, match=r"input\.steps: must be >= 0"):
        await adapter.submit(submit_request())


async def test_no_connection_within_the_window_is_unreachable(held):
    adapter, cog, _ = held
    cog.fails(httpx.ConnectError("refused"))
    with pytest.raises(UpstreamUnreachable):
        await adapter.submit(submit_request())


async def test_a_long_prediction_is_held_and_its_answer_handed_over(held):
    adapter, cog, delivered = held
    ended = cog.later(200, DONE)
    snapshot = await adapter.submit(submit_request())
    assert snapshot.state is JobState.RUNNING and snapshot.raw_status == "processing"
    assert delivered.answers == []
    ended.set()
    job_id, answer = await delivered.one()
    assert (job_id, answer["status"], answer["output"]) == (JOB, "succeeded", "HI")
    assert adapter._calls == {}  # handed over: nothing kept


async def test_a_retried_submit_of_a_held_job_sends_nothing(held):
    adapter, cog, _ = held
    ended = cog.later(200, DONE)
    await adapter.submit(submit_request())
    again = await adapter.submit(submit_request())
    assert again.state is JobState.RUNNING
    assert len(cog.requests) == 1
    ended.set()


async def test_a_busy_answer_after_the_window_is_sent_again(held):
    adapter, cog, delivered = held
    busy = cog.later(409, {"error": "At capacity", "status": "failed"})
    cog.now(200, DONE)
    await adapter.submit(submit_request())
    busy.set()
    _, answer = await delivered.one()
    assert answer["status"] == "succeeded"
    assert [r.method for r in cog.requests] == ["PUT", "PUT"]


async def test_a_refusal_after_the_window_fails_the_prediction_with_cogs_reason(held):
    adapter, cog, delivered = held
    refused = cog.later(422, {"detail": [{"loc": ["body", "input", "prompt"],
                                          "msg": "Field required"}]})
    await adapter.submit(submit_request())
    refused.set()
    _, answer = await delivered.one()
    assert answer["status"] == "failed"
    assert "input.prompt: Field required" in answer["error"]
    assert adapter.parse_webhook(json.dumps(answer).encode()).state is JobState.FAILED


async def test_an_answer_not_handed_over_is_kept_for_the_next_probe(held):
    adapter, cog, delivered = held
    delivered.fail = True
    ended = cog.later(200, DONE)
    await adapter.submit(submit_request())
    ended.set()
    await until(lambda: JOB in adapter._calls and adapter._calls[JOB].snapshot is not None)
    snapshot = await adapter.fetch(ref())
    assert snapshot.state is JobState.COMPLETED and snapshot.output == "HI"
    assert len(cog.requests) == 1  # no probe sent: the answer was known
    assert adapter._calls == {}


async def test_a_probe_of_a_held_prediction_reads_its_progress(held):
    adapter, cog, _ = held
    ended = cog.later(200, DONE)
    await adapter.submit(submit_request())
    cog.now(202, IN_FLIGHT)
    snapshot = await adapter.fetch(ref())
    assert snapshot.state is JobState.RUNNING and snapshot.logs == "step 1/3\n"
    probe = cog.requests[1]
    assert probe.headers["prefer"] == "respond-async"
    ended.set()


async def test_a_probe_that_finds_a_held_prediction_forgotten_waits_for_its_answer(held):
    adapter, cog, _ = held
    ended = cog.later(200, DONE)
    await adapter.submit(submit_request())
    cog.now(202, {"id": JOB, "status": "starting"})  # the probe created it: Cog forgot it
    cog.now(200, {})  # the probe's own prediction canceled
    snapshot = await adapter.fetch(ref())
    assert snapshot.state is JobState.RUNNING and not snapshot.lost
    ended.set()


async def test_a_probe_of_a_job_held_elsewhere_finds_it_lost(held):
    adapter, cog, _ = held
    cog.now(202, {"id": JOB, "status": "starting"})
    cog.now(200, {})
    snapshot = await adapter.fetch(ref())  # not held here: a restart lost the answer
    assert snapshot.lost and snapshot.state is JobState.FAILED


async def test_cancel_of_a_held_prediction_is_cogs_cancel_and_its_answer_ends_it(held):
    adapter, cog, delivered = held
    ended = cog.later(200, {"id": JOB, "status": "canceled", "logs": ""})
    await adapter.submit(submit_request())
    cog.now(200, {})
    assert await adapter.cancel(ref()) is True
    assert cog.requests[1].url.path == f"/predictions/{JOB}/cancel"
    ended.set()
    _, answer = await delivered.one()
    assert answer["status"] == "canceled"


async def test_a_probe_of_a_call_waiting_after_a_busy_answer_sends_nothing(held, monkeypatch):
    adapter, cog, _ = held
    monkeypatch.setattr(cog_held, "_BUSY_FIRST_S", 3600.0)
    adapter._rng.random = lambda: 1.0  # type: ignore[method-assign]
    busy = cog.later(409, {"error": "At capacity", "status": "failed"})
    await adapter.submit(submit_request())
    busy.set()
    await until(lambda: adapter._calls[JOB].busy)
    snapshot = await adapter.fetch(ref())
    assert snapshot.state is JobState.QUEUED and snapshot.raw_status == "starting"
    assert len(cog.requests) == 1  # a probe would have created a prediction at Cog


async def test_cancel_of_a_call_waiting_after_a_busy_answer_ends_it_without_cog(held,
                                                                               monkeypatch):
    adapter, cog, delivered = held
    monkeypatch.setattr(cog_held, "_BUSY_FIRST_S", 3600.0)  # waits to be sent again
    adapter._rng.random = lambda: 1.0  # type: ignore[method-assign]
    busy = cog.later(409, {"error": "At capacity", "status": "failed"})
    await adapter.submit(submit_request())
    busy.set()
    await until(lambda: adapter._calls[JOB].busy)
    assert await adapter.cancel(ref()) is True
    _, answer = await delivered.one()
    assert answer["status"] == "canceled"
    assert len(cog.requests) == 1  # nothing sent to Cog: it never had the prediction


async def test_a_transport_failure_mid_hold_leaves_the_job_to_the_probe(held):
    adapter, cog, delivered = held
    dropped = asyncio.Event()

    async def drop() -> httpx.Response:
        await dropped.wait()
        raise httpx.ReadError("connection reset")

    cog.answers.append(drop)
    await adapter.submit(submit_request())
    dropped.set()
    await until(lambda: adapter._calls == {})
    assert delivered.answers == []


async def test_aclose_waits_for_a_held_prediction_that_ends_meanwhile(held, monkeypatch):
    adapter, cog, delivered = held
    monkeypatch.setattr(cog_held, "DRAIN_S", 30.0)
    ended = cog.later(200, DONE)
    await adapter.submit(submit_request())
    closing = asyncio.create_task(adapter.aclose())
    await until(lambda: delivered.answers == [] and not closing.done())
    ended.set()
    await asyncio.wait_for(closing, 5)
    assert [(job, answer["status"]) for job, answer in delivered.answers] == [
        (JOB, "succeeded")]


async def test_aclose_drops_held_requests_past_the_drain(held):
    adapter, cog, delivered = held
    cog.later(200, DONE)  # never ends
    await adapter.submit(submit_request())
    await adapter.aclose()
    assert adapter._calls == {} and delivered.answers == []
