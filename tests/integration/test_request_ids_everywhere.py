"""``X-Request-Id`` on every response the front middleware sees (gateway/http/access.py):
the ones the router makes (404, 405), one refused before its body was read (413, sent by
``close_if_unread`` itself), a file served from owned storage, a provider webhook's."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from contracts.job import JobState
from tests.support.gateway import VERSION, GatewayHarness


async def test_router_answers_carry_the_request_id(gateway: GatewayHarness) -> None:
    missing = await gateway.client.get("/v1/nowhere", headers={
        **gateway.headers, "X-Request-Id": "r-404"})
    assert missing.status == 404 and missing.headers["X-Request-Id"] == "r-404"
    wrong = await gateway.client.delete("/v1/predictions", headers={
        **gateway.headers, "X-Request-Id": "r-405"})
    assert wrong.status == 405 and wrong.headers["X-Request-Id"] == "r-405"


async def test_a_body_refused_unread_carries_the_request_id(make_gateway: Any) -> None:
    gateway = await make_gateway(gateway={"max_body_bytes": 1024})
    refused = await gateway.client.post(
        "/v1/predictions", data=b"x" * 4096,
        headers={**gateway.headers, "X-Request-Id": "r-413", "Content-Type": "application/json"})
    assert refused.status == 413 and refused.headers["X-Request-Id"] == "r-413"


async def test_an_output_file_and_a_provider_webhook_carry_the_request_id(
    gateway: GatewayHarness,
) -> None:
    created = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    provider, token = await gateway.store.callback_token(created["id"])  # type: ignore[misc]
    body = gateway.fake.webhook_body(created["id"], JobState.COMPLETED,
                                     output="data:text/plain;base64,aGk=")
    hook = await gateway.client.post(
        f"/provider-webhooks/{provider}/{created['id']}/{token}", data=body,
        headers={**gateway.fake.sign(body), "X-Request-Id": "r-hook"})
    assert hook.status == 200 and hook.headers["X-Request-Id"] == "r-hook"
    done = await gateway.wait_for(created["id"], "succeeded")
    asset = await gateway.client.get(urlsplit(done["output"]).path,
                                     headers={"X-Request-Id": "r-asset"})
    assert asset.status == 200 and await asset.read() == b"hi"
    assert asset.headers["X-Request-Id"] == "r-asset"
