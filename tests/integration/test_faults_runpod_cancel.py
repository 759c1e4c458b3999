"""Issue 20, RunPod's acknowledged cancel, through the ``replicate`` client: ``/cancel``
answered ``CANCELLED`` ends the prediction ``canceled`` at once and it stays so, although
the worker keeps running and reports ``COMPLETED`` with output afterwards; that late
output is logged, never applied (no ``succeeded`` webhook to the app, no stream output),
and the execution time it reports is still counted (docs/providers.md, "runpod")."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.front import Front, front
from tests.support.gateway import VERSION
from tests.support.receiver import Receiver
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

EXECUTION = re.compile(r'cutover_provider_execution_seconds_total\{provider="up"\} ([0-9.]+)')


@pytest.fixture
async def runpod(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeRunPod]:
    monkeypatch.setenv("CUTOVER_TEST_RUNPOD_KEY", RUNPOD_TOKEN)
    async with FakeRunPod(token=RUNPOD_TOKEN) as server:
        assert isinstance(server, FakeRunPod)
        yield server


@pytest.fixture
async def up(runpod: FakeRunPod, make_settings: Callable[..., Any],
             aiohttp_client: Callable[..., Any]) -> AsyncIterator[Front]:
    provider = {"kind": "runpod", "base_url": f"{runpod.url}/v2",
                "token_env": "CUTOVER_TEST_RUNPOD_KEY", "fetch_interval_s": 0.02,
                "fetch_max_interval_s": 0.05}
    made = await front(make_settings, aiohttp_client, provider, "ep-echo",
                       cancel_grace_s=300.0)
    yield made
    await made.aclose()


async def executed_s(up: Front) -> float:
    text = await (await up.h.client.get("/metrics", headers=up.h.headers)).text()
    found = EXECUTION.search(text)
    return float(found.group(1)) if found else 0.0


async def test_an_acknowledged_cancel_ends_canceled_and_late_output_is_not_applied(
    up: Front, runpod: FakeRunPod, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO)
    async with Receiver() as hooks:
        prediction = await up.client.predictions.async_create(
            version=VERSION, input={"prompt": "hello"}, webhook=hooks.url())
        await wait_until(lambda: runpod.jobs, what="the submit reached RunPod")
        job = runpod.only()
        runpod.start(job)

        async def status() -> str:
            await prediction.async_reload()
            return str(prediction.status)

        await wait_until(lambda: _is(status(), "processing"), what="processing")
        runpod.cancel_ignored = True  # CANCELLED, while the worker runs on
        await prediction.async_cancel()
        await wait_until(lambda: _is(status(), "canceled"), timeout_s=60,
                         what="canceled on RunPod's CANCELLED (well before cancel_grace_s)")

        runpod.finish(job)  # the worker ends anyway, with output, and calls back
        late = runpod.deliveries[-1]
        answer = await up.h.client.post(urlsplit(late.url).path, data=late.body,
                                        headers=late.headers)
        assert answer.status in (200, 202, 204)
        assert await wait_until(lambda: executed_s(up), what="the late execution time") == 0.5
        assert await status() == "canceled" and prediction.output is None

        completed = await wait_until(
            lambda: [r.payload for r in hooks.received if r.payload["status"] in
                     ("succeeded", "failed", "canceled")], what="the terminal webhook")
    assert [p["status"] for p in completed] == ["canceled"]
    assert all(r.payload["status"] != "succeeded" for r in hooks.received)
    assert any(r.getMessage() == "late_provider_outcome" for r in caplog.records)
    assert prediction.urls is not None
    prediction.urls["stream"] = up.stream_url(prediction)
    events = [(str(e.event.value), e.data) async for e in prediction.async_stream()]
    assert [e for e, _ in events if e == "output"] == [], events
    assert events[-1] == ("done", '{"reason": "canceled"}'), events


async def _is(value: Any, expected: str) -> bool:
    return await value == expected
