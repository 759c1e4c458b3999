"""Issue 20, a refusal carries no input: fal's 422 ``detail`` items echo the offending
``input`` (the prompt, a 1.5 MB base64 image). Whether the refusal comes by the signed
webhook (a 2 MB body) or by the poll's result read, the prediction's error is one line of
at most 1 KB naming the field in fal's words; and neither the prompt nor the base64 is in
``jobs.error``, ``provider_events.body``, the logs, or the app's webhook (outside its own
``input``) (docs/providers.md, "Error classes")."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.front import Front, front
from tests.support.gateway import VERSION
from tests.support.receiver import Receiver
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

PROMPT = "a secret prompt xyzzy-4471"
IMAGE_B64 = base64.b64encode(os.urandom(1_100_000)).decode()
IMAGE = "data:image/png;base64," + IMAGE_B64
NEEDLES = (PROMPT, IMAGE_B64[500_000:500_064], "data:image/png;base64,")


@pytest.fixture
async def fal(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeFal]:
    monkeypatch.setenv("CUTOVER_TEST_FAL_KEY", FAL_TOKEN)
    async with FakeFal(token=FAL_TOKEN) as server:
        assert isinstance(server, FakeFal)
        yield server


async def up_for(fal: FakeFal, make_settings: Callable[..., Any],
                 aiohttp_client: Callable[..., Any], fetch_interval_s: float) -> Front:
    provider = {"kind": "fal", "base_url": fal.url, "token_env": "CUTOVER_TEST_FAL_KEY",
                "jwks_url": f"{fal.url}/.well-known/jwks.json", "file_hosts": ["127.0.0.1"],
                "fetch_interval_s": fetch_interval_s, "fetch_max_interval_s": fetch_interval_s}
    return await front(make_settings, aiohttp_client, provider, "fal-ai/echo/fast")


def leaks(text: str) -> list[str]:
    return [needle[:40] for needle in NEEDLES if needle in text]


def without_input(body: bytes | str) -> str:
    payload = json.loads(body)
    payload.pop("input", None)
    return json.dumps(payload)


@pytest.mark.parametrize("route", ["webhook", "poll"])
async def test_a_refusal_keeps_neither_the_prompt_nor_the_image_anywhere(
    fal: FakeFal, make_settings: Callable[..., Any], aiohttp_client: Callable[..., Any],
    caplog: pytest.LogCaptureFixture, route: str,
):
    caplog.set_level(logging.DEBUG)
    up = await up_for(fal, make_settings, aiohttp_client, 30.0 if route == "webhook" else 0.05)
    try:
        async with Receiver() as hooks:
            prediction = await up.client.predictions.async_create(
                version=VERSION, input={"prompt": PROMPT, "image": IMAGE},
                webhook=hooks.url())
            await wait_until(lambda: fal.jobs, what="the submit reached fal")
            job = fal.only()
            fal.refuse(job, [
                {"loc": ["body", "prompt"], "msg": "The content was flagged by a content "
                 "checker.", "type": "content_policy_violation", "input": PROMPT,
                 "categories": ["sexual"]},
                {"loc": ["body", "image"], "msg": "The image was flagged.",
                 "type": "content_policy_violation", "input": IMAGE},
            ])
            if route == "webhook":
                sent = fal.deliveries[-1]
                assert len(sent.body) > 1_000_000
                answer = await up.h.client.post(urlsplit(sent.url).path, data=io.BytesIO(sent.body),
                                                headers=sent.headers)
                assert answer.status in (200, 202, 204)
            await asyncio.wait_for(prediction.async_wait(), 30)
            await wait_until(lambda: hooks.received and json.loads(
                hooks.received[-1].body)["status"] == "failed", what="the app's webhook")
            rows = await up.rows()
    finally:
        await up.aclose()
    error = prediction.error or ""
    assert prediction.status == "failed"
    assert "prompt: The content was flagged by a content checker. (content_policy_violation)" \
        in error, error
    assert "image: The image was flagged." in error
    assert len(error.encode()) <= 1024 and "\n" not in error
    assert leaks(error) == []
    assert [leaks(str(e)) for e in rows["errors"] if leaks(str(e))] == []
    assert rows["bodies"] or route == "poll"
    assert [leaks(b.decode(errors="replace")) for b in rows["bodies"]
            if leaks(b.decode(errors="replace"))] == []
    assert [leaks(without_input(p)) for p in rows["payloads"] if leaks(without_input(p))] == []
    assert [leaks(without_input(r.body)) for r in hooks.received
            if leaks(without_input(r.body))] == []
    logged = [leaks(str(r.__dict__)) for r in caplog.records if leaks(str(r.__dict__))]
    assert logged == []
