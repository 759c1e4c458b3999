"""Issue 20, fal's result reads as fal really fails them, through the ``replicate``
client: after ``COMPLETED`` a result read answered 429 (``Retry-After``), 5xx with a
``detail``, 404, or a dropped connection is read again, not a failure; only a structured
4xx refusal, or reads that keep failing past ``result_retry_window_s``, are final, with a
class saying who must act; a status carrying ``error`` still reads the result for fal's
own message; a 401 is an operator alert (docs/providers.md, "fal")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import replicate

from tests.support.front import Front, front
from tests.support.upstreams.base import UpJob
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

TARGET = "fal-ai/echo/fast"


@pytest.fixture
async def fal(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeFal]:
    monkeypatch.setenv("CUTOVER_TEST_FAL_KEY", FAL_TOKEN)
    async with FakeFal(token=FAL_TOKEN) as server:
        assert isinstance(server, FakeFal)
        yield server


def settings(fal: FakeFal, **extra: Any) -> dict[str, Any]:
    return {"kind": "fal", "base_url": fal.url, "token_env": "CUTOVER_TEST_FAL_KEY",
            "jwks_url": f"{fal.url}/.well-known/jwks.json", "file_hosts": ["127.0.0.1"],
            "fetch_interval_s": 0.05, "fetch_max_interval_s": 0.2, **extra}


@pytest.fixture
async def make_up(fal: FakeFal, make_settings: Callable[..., Any],
                  aiohttp_client: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    made: list[Front] = []

    async def make(**extra: Any) -> Front:
        made.append(await front(make_settings, aiohttp_client, settings(fal, **extra), TARGET))
        return made[-1]

    yield make
    for one in made:
        await one.aclose()


async def submitted(fal: FakeFal) -> UpJob:
    await wait_until(lambda: fal.jobs, what="the submit reached fal")
    return fal.only()


async def ended(prediction: replicate.prediction.Prediction) -> replicate.prediction.Prediction:
    await asyncio.wait_for(prediction.async_wait(), 30)
    return prediction


def reads(fal: FakeFal) -> list[float]:
    return [at for op, at in fal.times if op == "result"]


async def finished_after(up: Front, fal: FakeFal, *faults: tuple[Any, ...]
                         ) -> replicate.prediction.Prediction:
    """A prediction whose result reads meet ``faults`` (op result) after COMPLETED."""
    prediction = await up.create()
    job = await submitted(fal)
    for status, body, times, headers in faults:
        fal.fault("result", status, body, times, **headers)
    fal.finish(job)
    return await ended(prediction)


async def test_result_429_with_retry_after_is_read_again_after_the_wait(make_up, fal: FakeFal):
    up = await make_up()
    done = await finished_after(
        up, fal, (429, '{"detail": "Rate limit exceeded"}', 1, {"Retry_After": "1"}))
    assert (done.status, done.output) == ("succeeded", "HELLO"), done.error
    first, second = reads(fal)[:2]
    assert second - first >= 0.9  # Retry-After: 1 honoured


@pytest.mark.parametrize(("status", "body"), [
    (500, '{"detail": "Internal server error", "error_type": "runner_server_error"}'),
    (503, '{"detail": "Runner disconnected", "error_type": "runner_disconnected"}'),
    (404, '{"detail": "Request not found"}'),
    (0, ""),  # the connection drops
], ids=["500-detail", "503-detail", "404-after-completed", "connection-dropped"])
async def test_a_failed_result_read_after_completed_is_read_again(
    make_up, fal: FakeFal, status: int, body: str
):
    up = await make_up()
    done = await finished_after(up, fal, (status, body, 2, {}))
    assert (done.status, done.output) == ("succeeded", "HELLO"), done.error
    assert len(reads(fal)) == 3


async def test_reads_that_keep_failing_past_the_window_fail_as_a_provider_fault(
    make_up, fal: FakeFal
):
    up = await make_up(result_retry_window_s=1.0)
    done = await finished_after(
        up, fal, (503, '{"detail": "Runner disconnected"}', 10_000, {}))
    assert done.status == "failed"
    assert "provider fault" in (done.error or "") and "503" in (done.error or ""), done.error
    assert "Runner disconnected" in (done.error or "")
    assert len(reads(fal)) >= 2
    assert reads(fal)[-1] - reads(fal)[0] >= 0.9  # the window ran before the verdict


async def test_a_status_with_error_still_reads_the_result_for_fals_message(
    make_up, fal: FakeFal
):
    up = await make_up()
    prediction = await up.create(prompt="a forbidden prompt")
    job = await submitted(fal)
    fal.refuse(job, [{"loc": ["body", "prompt"], "msg": "The content was flagged by a "
                      "content checker.", "type": "content_policy_violation",
                      "input": "a forbidden prompt"}])
    done = await ended(prediction)
    assert done.status == "failed"
    error = done.error or ""
    assert "prompt: The content was flagged by a content checker." in error, error
    assert "content_policy_violation" in error and "refused the input" in error
    assert "a forbidden prompt" not in error  # fal's echo is dropped
    assert reads(fal), "the result was never read"


async def test_a_401_on_the_result_is_an_operator_alert_and_a_gateway_credentials_failure(
    make_up, fal: FakeFal, caplog: pytest.LogCaptureFixture
):
    up = await make_up()
    with caplog.at_level(logging.ERROR):
        done = await finished_after(up, fal, (401, '{"detail": "Unauthorized"}', 1, {}))
    assert done.status == "failed"
    assert "refused the gateway's credentials" in (done.error or ""), done.error
    alerts = [r for r in caplog.records if r.getMessage() == "provider_credentials_refused"]
    assert alerts and alerts[0].levelno == logging.ERROR
    metrics = await (await up.h.client.get("/metrics", headers=up.h.headers)).text()
    assert ('cutover_prediction_errors_total{error_class="gateway_credentials",provider="up"}'
            " 1.0") in metrics
