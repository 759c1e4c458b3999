"""Output conformance through the provider wire fakes: a RunPod result that does not have
the model's declared ``Output`` shape ends the prediction ``failed`` naming the mismatch,
the raw output kept for operators; a conforming one succeeds in the declared shape
(gateway/translation/conformance.py, docs/translation.md "Output conformance")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.contract.drivers import pump
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.upstreams.replicate import REPLICATE_TOKEN, FakeReplicate
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

POLL = {"fetch_interval_s": 0.02, "fetch_max_interval_s": 0.05}
ADMIN = "admin-test-token"  # a test value, not a credential


def schema(output: dict[str, Any]) -> dict[str, Any]:
    return {"openapi": "3.0.2", "info": {"title": "Cog", "version": "0.1.0"}, "paths": {},
            "components": {"schemas": {
                "Input": {"type": "object", "required": ["prompt"],
                          "properties": {"prompt": {"type": "string"}}},
                "Output": output}}}


TEXT_STREAM = {"type": "array", "items": {"type": "string"}, "x-cog-array-type": "iterator",
               "x-cog-array-display": "concatenate"}


@pytest.fixture
async def runpod(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeRunPod]:
    monkeypatch.setenv("CUTOVER_TEST_RUNPOD_KEY", RUNPOD_TOKEN)
    server = FakeRunPod(token=RUNPOD_TOKEN)
    async with server:
        yield server


async def runpod_gateway(make_gateway: Any, runpod: FakeRunPod,
                         output: dict[str, Any]) -> GatewayHarness:
    harness: GatewayHarness = await make_gateway(
        providers={"up": {"kind": "runpod", "base_url": f"{runpod.url}/v2",
                          "token_env": "CUTOVER_TEST_RUNPOD_KEY", **POLL}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "up",
                 "target": "ep-echo", "openapi_schema": schema(output)}],
        admin={"tokens": [ADMIN]},
    )
    return harness


async def finished(h: GatewayHarness, job_id: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        await pump(h, rounds=2)
        got = await h.get(job_id)
        return got if got["status"] in ("succeeded", "failed", "canceled") else None

    found: dict[str, Any] = await wait_until(done, 20.0, what=f"{job_id} finished")
    return found


async def upstream_job(h: GatewayHarness, server: Any) -> Any:
    async def one() -> Any:
        await pump(h, rounds=1)
        return server.only() if server.jobs else None

    return await wait_until(one, 20.0, what="the upstream job")


async def admin_view(h: GatewayHarness, job_id: str) -> dict[str, Any]:
    answer = await h.client.get(f"/admin/predictions/{job_id}",
                                headers={"Authorization": f"Bearer {ADMIN}"})
    assert answer.status == 200, await answer.text()
    found: dict[str, Any] = await answer.json()
    return found


URIS = {"type": "array", "items": {"type": "string", "format": "uri"}}


@pytest.mark.parametrize(
    ("declared", "result", "named"),
    [
        (URIS, {"id": "{id}", "status": "COMPLETED"}, "the provider returned no output"),
        (URIS, {"id": "{id}", "status": "COMPLETED", "output": None},
         "the provider returned no output (the model declares a list of URIs)"),
        (TEXT_STREAM, {"id": "{id}", "status": "COMPLETED", "output": ["a", {"error": "boom"}]},
         "output[1] is an object where the model declares a string"),
    ],
)
async def test_a_runpod_result_off_the_schema_fails_naming_it(
    make_gateway: Any, runpod: FakeRunPod, declared: dict[str, Any], result: dict[str, Any],
    named: str,
) -> None:
    h = await runpod_gateway(make_gateway, runpod, declared)
    created = await h.create({"version": VERSION, "input": {"prompt": "hi"}})
    job = await upstream_job(h, runpod)
    body = json.dumps(result).replace("{id}", job.id)
    runpod.fault("status", 200, body, times=1000, **{"Content-Type": "application/json"})
    got = await finished(h, created["id"])
    assert got["status"] == "failed"
    assert named in got["error"] and "\n" not in got["error"]
    assert got["output"] is None
    seen = await admin_view(h, created["id"])
    assert seen["raw_output"] == result.get("output")


async def test_a_null_output_succeeds_where_the_schema_allows_it(
    make_gateway: Any, runpod: FakeRunPod
) -> None:
    h = await runpod_gateway(make_gateway, runpod, {"type": "string", "nullable": True})
    created = await h.create({"version": VERSION, "input": {"prompt": "hi"}})
    job = await upstream_job(h, runpod)
    runpod.fault("status", 200, json.dumps({"id": job.id, "status": "COMPLETED", "output": None}),
                 times=1000, **{"Content-Type": "application/json"})
    got = await finished(h, created["id"])
    assert got["status"] == "succeeded" and got["output"] is None


async def test_a_one_element_list_where_one_uri_is_declared_is_that_uri(
    make_gateway: Any, runpod: FakeRunPod
) -> None:
    h = await runpod_gateway(make_gateway, runpod, {"type": "string", "format": "uri"})
    created = await h.create({"version": VERSION, "input": {"prompt": "hi"}})
    job = await upstream_job(h, runpod)
    runpod.finish(job, ["data:text/plain;base64,SEk="])
    got = await finished(h, created["id"])
    assert got["status"] == "succeeded"
    assert isinstance(got["output"], str) and "/assets/" in got["output"]


@pytest.fixture
async def openai(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    monkeypatch.setenv("CUTOVER_TEST_OPENAI_KEY", OPENAI_TOKEN)
    server = FakeOpenAI(token=OPENAI_TOKEN)
    async with server:
        yield server


async def test_streamed_text_is_one_string_where_the_schema_says_string(
    make_gateway: Any, openai: FakeOpenAI
) -> None:
    h: GatewayHarness = await make_gateway(
        providers={"up": {"kind": "openai", "base_url": f"{openai.url}/v1",
                          "token_env": "CUTOVER_TEST_OPENAI_KEY", **POLL}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "up",
                 "target": "echo-1", "openapi_schema": schema({"type": "string"})}],
    )
    created = await h.create({"version": VERSION, "input": {"prompt": "hello big world"}})
    got = await finished(h, created["id"])
    assert got["status"] == "succeeded"
    assert got["output"] == "HELLO BIG WORLD"


@pytest.fixture
async def replicate_up(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeReplicate]:
    monkeypatch.setenv("CUTOVER_TEST_REPLICATE_TOKEN", REPLICATE_TOKEN)
    server = FakeReplicate(token=REPLICATE_TOKEN)
    async with server:
        yield server


@pytest.mark.parametrize("target", [f"acme/upstream:{'e' * 64}", "acme/upstream"])
async def test_a_replicate_route_serves_the_upstream_versions_schema(
    make_gateway: Any, replicate_up: FakeReplicate, target: str
) -> None:
    upstream = schema({"type": "array", "items": {"type": "string", "format": "uri"}})
    replicate_up.versions["acme/upstream"] = ("e" * 64, upstream)
    h: GatewayHarness = await make_gateway(
        providers={"up": {"kind": "replicate", "base_url": replicate_up.url,
                          "token_env": "CUTOVER_TEST_REPLICATE_TOKEN", **POLL}},
        routes=[{"model": "acme/echo", "provider": "up", "target": target}],
    )
    model = await (await h.client.get("/v1/models/acme/echo", headers=h.headers)).json()
    assert model["latest_version"]["openapi_schema"] == upstream
    answer = await h.client.post("/v1/models/acme/echo/predictions", headers=h.headers,
                                 json={"input": {"prompt": 1}})
    assert answer.status == 422 and "input.prompt" in (await answer.json())["detail"]


async def test_a_route_whose_schema_is_unknown_says_so_never_empty_properties(
    make_gateway: Any,
) -> None:
    h: GatewayHarness = await make_gateway()  # the fake provider cannot tell a schema
    model = await (await h.client.get("/v1/models/acme/plain", headers=h.headers)).json()
    latest = model["latest_version"]
    assert latest is not None and len(latest["id"]) == 64
    inputs = latest["openapi_schema"]["components"]["schemas"]["Input"]
    assert "properties" not in inputs
    assert "does not know this model's schema" in inputs["description"]
