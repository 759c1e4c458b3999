"""Issue 20, OpenAI-compatible streams as real servers end them, through the ``replicate``
client: TGI's ``finish_reason`` then EOF without ``[DONE]`` is a finished answer; an
in-band error event (TGI's, vLLM's, llama.cpp's form) fails the prediction with the
server's own message, which the stream's readers get as an SSE ``error`` event
(docs/providers.md, "OpenAI-compatible"; docs/streaming.md)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import replicate

from tests.support.front import Front, front
from tests.support.upstreams.openai import IN_BAND_ERRORS, OPENAI_TOKEN, FakeOpenAI

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)


@pytest.fixture
async def openai(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    monkeypatch.setenv("CUTOVER_TEST_OPENAI_KEY", OPENAI_TOKEN)
    async with FakeOpenAI(token=OPENAI_TOKEN) as server:
        assert isinstance(server, FakeOpenAI)
        yield server


@pytest.fixture
async def up(openai: FakeOpenAI, make_settings: Callable[..., Any],
             aiohttp_client: Callable[..., Any]) -> AsyncIterator[Front]:
    provider = {"kind": "openai", "base_url": f"{openai.url}/v1",
                "token_env": "CUTOVER_TEST_OPENAI_KEY", "fetch_interval_s": 0.02,
                "fetch_max_interval_s": 0.05}
    made = await front(make_settings, aiohttp_client, provider, "echo-1")
    yield made
    await made.aclose()


async def ended(prediction: replicate.prediction.Prediction) -> replicate.prediction.Prediction:
    await asyncio.wait_for(prediction.async_wait(), 20)
    return prediction


async def test_tgi_finish_reason_then_eof_without_done_succeeds(up: Front, openai: FakeOpenAI):
    openai.stream_end = "eof"
    prediction = await ended(await up.create(prompt="hello world"))
    assert prediction.status == "succeeded", prediction.error
    assert prediction.output == ["HELLO ", "WORLD"]


async def test_eof_before_any_finish_reason_still_fails(up: Front, openai: FakeOpenAI):
    openai.stream_error = ""  # the first chunk, then the connection ends
    prediction = await ended(await up.create(prompt="hello world"))
    assert prediction.status == "failed"
    assert "ended before [DONE]" in (prediction.error or "")


@pytest.mark.parametrize("server", sorted(IN_BAND_ERRORS))
async def test_in_band_error_fails_with_the_servers_message_and_reaches_the_stream(
    up: Front, openai: FakeOpenAI, server: str
):
    event, message = IN_BAND_ERRORS[server]
    openai.stream_error = event
    prediction = await ended(await up.create(prompt="hello world"))
    assert prediction.status == "failed"
    assert message in (prediction.error or ""), prediction.error
    assert prediction.urls is not None
    prediction.urls["stream"] = up.stream_url(prediction)
    with pytest.raises(RuntimeError, match=re.escape(message)):  # the client's "error"
        async for event in prediction.async_stream():
            assert event.event.value != "done", "the stream ended without its error event"
