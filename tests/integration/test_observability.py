"""Request ids, JSON request and transition logs, no secrets in any log line, and the
per-token 429 (docs/logging.md, docs/limits.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.logs import JsonFormatter, TextFormatter
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.receiver import Receiver

APP_TOKEN = "r8_observability_app_token_0123456789abc"  # a test value
SIGNING = "whsec_" + "c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seQ=="  # a test value
FAKE_SECRET = "fake-secret"  # the fake provider's HMAC key (adapters/fake.py)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


@pytest.fixture
async def observed(make_gateway: Any) -> GatewayHarness:
    gateway = await make_gateway(
        gateway={"api_tokens": [], "named_api_tokens": {"billing-app": APP_TOKEN}},
        webhooks={"allow_hosts": ["127.0.0.1"], "signing_secret": SIGNING},
    )
    gateway.headers = {"Authorization": f"Bearer {APP_TOKEN}"}
    return gateway


def lines(caplog: pytest.LogCaptureFixture, event: str | None = None) -> list[dict[str, Any]]:
    formatter = JsonFormatter()
    found = [json.loads(formatter.format(r)) for r in caplog.records]
    return [f for f in found if event is None or f["event"] == event]


async def test_request_ids_are_kept_or_made(observed: GatewayHarness) -> None:
    kept = await observed.client.get("/v1/account", headers={
        **observed.headers, "X-Request-Id": "abc-123"})
    assert kept.headers["X-Request-Id"] == "abc-123"
    made = await observed.client.get("/v1/account", headers={
        **observed.headers, "X-Request-Id": "bad id\twith spaces"})
    assert len(made.headers["X-Request-Id"]) == 32
    refused = await observed.client.get("/v1/account")
    assert refused.status == 401 and refused.headers["X-Request-Id"]


async def test_one_json_line_per_request_and_per_transition(
    observed: GatewayHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    created = await observed.create({"version": VERSION, "input": {"prompt": "hi"}},
                                    **{"X-Request-Id": "req-1"})
    await observed.settle()
    await observed.deliver(created["id"], JobState.COMPLETED, output="HI")
    await observed.settle()
    await observed.get(created["id"])
    request = next(r for r in lines(caplog, "request") if r["request_id"] == "req-1")
    assert request["method"] == "POST" and request["route"] == "/v1/predictions"
    assert request["status"] == 201 and request["token"] == "billing-app"
    assert isinstance(request["duration_ms"], float)
    gets = [r for r in lines(caplog, "request") if r["method"] == "GET"]
    assert gets[-1]["route"] == "/v1/predictions/{id}"
    moves = [r for r in lines(caplog, "job_transition") if r["prediction_id"] == created["id"]]
    assert [(m["old_state"], m["new_state"]) for m in moves][-1] == ("running", "completed") or \
        moves[-1]["new_state"] == "completed"
    final = moves[-1]
    assert final["provider"] == "fake" and final["provider_job_id"] == f"fake-{created['id']}"
    assert "finalized_s" in final and "submitted_s" in final
    assert TextFormatter().format(caplog.records[-1])  # the text format renders too


async def test_no_secret_reaches_any_log_line(
    observed: GatewayHarness,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)  # the default level of `cutover serve`
    caplog.set_level(logging.DEBUG, logger="gateway")  # and everything of ours
    caplog.set_level(logging.DEBUG, logger="adapters")
    # As gateway.logs.configure sets them (`cutover serve` also runs with no access log):
    for name in ("aiohttp.access", "aiosqlite", "asyncpg", "sqlalchemy"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.WARNING)
    created = await observed.create(
        {"version": VERSION, "input": {"prompt": "hi"}, "webhook": receiver.url()}
    )
    await observed.settle()
    await observed.deliver(created["id"], JobState.RUNNING, logs="step 1\n")
    await observed.deliver(created["id"], JobState.COMPLETED, output="HI")
    await observed.settle()
    await receiver.wait_for(1)
    form = aiohttp.FormData()
    form.add_field("content", b"bytes", filename="a.txt", content_type="text/plain")
    upload = await observed.client.post("/v1/files", data=form, headers=observed.headers)
    assert upload.status == 201
    stream_url = created["urls"]["stream"].removeprefix("https://gateway.test")
    assert (await observed.client.get(stream_url)).status == 200
    await observed.client.get("/v1/predictions", headers={"Authorization": "Bearer r8_wrong"})
    async with observed.store.engine.connect() as conn:
        callback_tokens = [r[0] for r in await conn.execute(sa.select(jobs.c.callback_token))]
    secrets = [APP_TOKEN, "r8_wrong", SIGNING, SIGNING.removeprefix("whsec_"), FAKE_SECRET,
               *callback_tokens, stream_url.partition("?t=")[2]]
    secrets += [r.headers["webhook-signature"] for r in receiver.received]
    secrets += [s.split(",", 1)[1] for r in receiver.received
                for s in r.headers["webhook-signature"].split()]
    text = "\n".join(json.dumps(line) for line in lines(caplog))
    assert len(caplog.records) > 10
    for secret in secrets:
        assert secret and secret not in text, f"a secret ({secret[:6]}...) reached the logs"


async def test_over_the_limit_is_429_with_retry_after(make_gateway: Any) -> None:
    gateway = await make_gateway(
        limits={"enabled": True, "creates_per_minute": 6, "other_per_minute": 600,
                "burst_s": 10},
    )
    body = {"version": VERSION, "input": {"prompt": "x"}}
    first = await gateway.client.post("/v1/predictions", json=body, headers=gateway.headers)
    assert first.status == 201
    second = await gateway.client.post("/v1/predictions", json=body, headers=gateway.headers)
    assert second.status == 429
    assert second.content_type == "application/problem+json"
    assert second.headers["Retry-After"].isdigit() and int(second.headers["Retry-After"]) >= 1
    assert "throttled" in (await second.json())["detail"]
    # Other requests have their own bucket; the refused create left no row.
    listed = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    assert listed.status == 200 and len((await listed.json())["results"]) == 1
    metrics = await (await gateway.client.get("/metrics")).text()
    assert 'cutover_rate_limited_total{kind="create",token="token-1"} 1.0' in metrics


async def test_limits_are_off_by_default(gateway: GatewayHarness) -> None:
    body = {"version": VERSION, "input": {"prompt": "x"}}
    for _ in range(15):
        answer = await gateway.client.post("/v1/predictions", json=body, headers=gateway.headers)
        assert answer.status == 201
