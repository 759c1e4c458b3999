"""Two tenants behind one gateway see nothing of each other (docs/security.md).

Tenant ``a`` (``[[tenants]]``) and ``default`` (``[gateway] api_tokens``) each create
predictions; over every endpoint that names, lists, cancels or streams a prediction, a
token of one tenant finds the other's as it finds an unknown id: a 404, never a 403, and
the list shows only its own (both backends: the store's queries are what is exercised).
Files and idempotency keys stay apart, each tenant gets its own webhook secret (its
webhooks and stream URLs are signed with it), a route limited to a tenant does not exist
for the others, and the unmodified ``replicate`` client sees the same.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import replicate
from replicate.exceptions import ReplicateError

from contracts.job import JobState
from gateway.http import keys
from tests.support.gateway import TOKEN, VERSION, GatewayHarness
from tests.support.receiver import Receiver

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

TOKEN_A = "r8_tenant_a_token"  # test values, not credentials
TOKEN_A2 = "r8_tenant_a_second"
A = {"Authorization": f"Bearer {TOKEN_A}"}
A2 = {"Authorization": f"Bearer {TOKEN_A2}"}
D = {"Authorization": f"Bearer {TOKEN}"}
ECHO = {"version": VERSION, "input": {"text": "secret of the tenant"}}
TENANTS = [{"name": "a", "api_tokens": [TOKEN_A, TOKEN_A2]}]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


@pytest.fixture
async def two(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(
        tenants=TENANTS,
        routes=[
            {"model": "acme/echo", "version": VERSION, "provider": "fake"},
            {"model": "acme/plain", "provider": "fake"},
            {"model": "acme/only-a", "provider": "fake", "tenants": ["a"]},
        ],
    )


async def _create(gw: GatewayHarness, headers: dict[str, str], body: Any = None,
                  **more: str) -> dict[str, Any]:
    response = await gw.client.post("/v1/predictions", json=body or ECHO,
                                    headers={**headers, **more})
    assert response.status == 201, await response.text()
    return await response.json()


async def _status(gw: GatewayHarness, method: str, path: str, headers: dict[str, str]) -> int:
    response = await gw.client.request(method, path, headers=headers)
    await response.read()
    return response.status


async def test_another_tenants_prediction_is_a_404_on_every_endpoint(two: GatewayHarness):
    mine = await _create(two, A)
    theirs = await _create(two, D)
    unknown = "0" * 26
    for prefix in ("/v1", ""):
        for pid, ok_for, other in ((mine["id"], A, D), (theirs["id"], D, A)):
            get = f"{prefix}/predictions/{pid}"
            assert await _status(two, "GET", get, ok_for) == 200
            assert await _status(two, "GET", get, other) == 404
            assert await _status(two, "POST", f"{get}/cancel", other) == 404
        # the refusal reads as an unknown id's: nothing says the prediction exists
        refused = await two.client.get(f"{prefix}/predictions/{mine['id']}", headers=D)
        missing = await two.client.get(f"{prefix}/predictions/{unknown}", headers=D)
        assert (await refused.json())["detail"] == (
            (await missing.json())["detail"].replace(unknown, mine["id"]))
    # the refused cancel changed nothing: the prediction is still live
    await two.settle()
    assert (await two.store.get(mine["id"])).cancel_requested_at is None
    # a second token of the same tenant sees and cancels it
    assert await _status(two, "GET", f"/v1/predictions/{mine['id']}", A2) == 200
    response = await two.client.post(f"/v1/predictions/{mine['id']}/cancel", headers=A2)
    assert response.status == 200, await response.text()


async def test_a_finished_prediction_kept_in_memory_is_still_refused(two: GatewayHarness):
    mine = await _create(two, A)
    await two.settle()
    await two.deliver(mine["id"], JobState.COMPLETED, output="done")
    await two.settle()
    for _ in range(2):  # the second GET is served from the finished bodies
        assert await _status(two, "GET", f"/v1/predictions/{mine['id']}", A) == 200
        assert await _status(two, "GET", f"/v1/predictions/{mine['id']}", D) == 404


async def test_each_tenant_lists_only_its_own_predictions_page_by_page(two: GatewayHarness):
    mine = {(await _create(two, A))["id"] for _ in range(3)}
    theirs = {(await _create(two, D))["id"] for _ in range(2)}
    for headers, expected in ((A, mine), (A2, mine), (D, theirs)):
        response = await two.client.get("/v1/predictions", headers=headers)
        page = await response.json()
        assert {p["id"] for p in page["results"]} == expected
    # cursor paging stays inside the tenant (101 of a's on two pages, none of default's)
    mine |= {(await _create(two, A))["id"] for _ in range(98)}
    seen: list[str] = []
    url: str | None = "/v1/predictions"
    while url is not None:
        page = await (await two.client.get(url.removeprefix("https://gateway.test"),
                                           headers=A)).json()
        seen += [p["id"] for p in page["results"]]
        url = page["next"]
    assert len(seen) == len(mine) == 101 and set(seen) == mine


async def test_stream_urls_are_signed_with_their_tenants_secret(two: GatewayHarness):
    mine = await _create(two, A, {**ECHO, "stream": True})
    theirs = await _create(two, D, {**ECHO, "stream": True})
    secrets = two.app[keys.TENANT_SECRETS]
    assert secrets["a"] != secrets["default"]
    for created in (mine, theirs):
        stream = created["urls"]["stream"].removeprefix("https://gateway.test")
        response = await two.client.get(stream)  # its own URL streams
        assert response.status == 200
        response.close()
    # default's secret (what its tokens are given) cannot sign a stream URL of a's
    forged = _stream_token(secrets["default"], mine["id"])
    assert await _status(two, "GET", f"/streams/{mine['id']}?t={forged}", {}) == 404
    # nor can a's sign default's; each stream token is its own prediction's
    forged = _stream_token(secrets["a"], theirs["id"])
    assert await _status(two, "GET", f"/streams/{theirs['id']}?t={forged}", {}) == 404
    token = mine["urls"]["stream"].rpartition("t=")[2]
    assert await _status(two, "GET", f"/streams/{theirs['id']}?t={token}", {}) == 404


def _stream_token(secret: str, job_id: str) -> str:
    mac = hmac.new(secret.encode(), f"stream:{job_id}".encode(), hashlib.sha256)
    return mac.hexdigest()[:32]


async def test_each_tenant_is_given_and_signed_with_its_own_webhook_secret(
    two: GatewayHarness, receiver: Receiver,
):
    given = {}
    for name, headers in (("a", A), ("a2", A2), ("default", D)):
        response = await two.client.get("/v1/webhooks/default/secret", headers=headers)
        given[name] = (await response.json())["key"]
    assert given["a"] == given["a2"] != given["default"]
    for headers in (A, D):
        created = await _create(two, headers, {**ECHO, "webhook": receiver.url(),
                                               "webhook_events_filter": ["completed"]})
        await two.settle()
        await two.deliver(created["id"], JobState.COMPLETED, output="done")
        await two.settle()
    got = await receiver.wait_for(2)
    for hook, name in zip(got, ("a", "default"), strict=True):
        assert _verifies(given[name], hook)
        assert not _verifies(given["default" if name == "a" else "a"], hook)


def _verifies(secret: str, hook: Any) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{hook.headers['webhook-id']}.{hook.headers['webhook-timestamp']}.".encode()
    mac = base64.b64encode(hmac.new(key, signed + hook.body, hashlib.sha256).digest()).decode()
    return f"v1,{mac}" in hook.headers["webhook-signature"].split(" ")


async def test_idempotency_keys_and_files_stay_within_the_token(two: GatewayHarness):
    first = await _create(two, A, **{"Idempotency-Key": "k1"})
    other = await _create(two, D, **{"Idempotency-Key": "k1"})
    assert first["id"] != other["id"]
    again = await _create(two, A, **{"Idempotency-Key": "k1"})
    assert again["id"] == first["id"]
    form = aiohttp.FormData()
    form.add_field("content", b"tenant a bytes", filename="a.txt", content_type="text/plain")
    response = await two.client.post("/v1/files", data=form, headers=A)
    assert response.status == 201, await response.text()
    uploaded = await response.json()
    for method, path in (("GET", f"/v1/files/{uploaded['id']}"),
                         ("GET", f"/v1/files/{uploaded['id']}/download"),
                         ("DELETE", f"/v1/files/{uploaded['id']}")):
        assert await _status(two, method, path, D) == 404
    listed = await (await two.client.get("/v1/files", headers=D)).json()
    assert listed["results"] == []
    assert await _status(two, "GET", f"/v1/files/{uploaded['id']}", A) == 200
    # nor can a prediction of another tenant name it as an input
    named = {"version": VERSION, "input": {"text": uploaded["urls"]["get"]}}
    response = await two.client.post("/v1/predictions", json=named, headers=D)
    assert response.status == 404
    assert (await response.json())["detail"] == (
        f"the input names file {uploaded['id']!r}, which does not exist")
    assert (await _create(two, A2, named))["input"] == named["input"]


async def test_a_route_limited_to_a_tenant_does_not_exist_for_the_others(two: GatewayHarness):
    body = {"input": {"text": "hi"}}
    response = await two.client.post("/v1/models/acme/only-a/predictions", json=body, headers=D)
    unknown = await two.client.post("/v1/models/acme/nowhere/predictions", json=body, headers=D)
    assert response.status == unknown.status == 404
    problem, expected = await response.json(), await unknown.json()
    assert problem["detail"] == expected["detail"].replace("acme/nowhere", "acme/only-a")
    assert await _status(two, "GET", "/v1/models/acme/only-a", D) == 404
    assert await _status(two, "GET", "/v1/models/acme/only-a", A) == 200
    response = await two.client.post("/v1/models/acme/only-a/predictions", json=body, headers=A)
    assert response.status == 201, await response.text()
    assert (await two.store.get((await response.json())["id"])).tenant == "a"


async def test_the_replicate_client_sees_only_its_tenants_predictions(two: GatewayHarness):
    base = str(two.client.make_url("")).rstrip("/")
    client_a = replicate.Client(api_token=TOKEN_A, base_url=base)
    client_d = replicate.Client(api_token=TOKEN, base_url=base)
    try:
        mine = await client_a.predictions.async_create(version=VERSION, input={"text": "a"})
        theirs = await client_d.predictions.async_create(version=VERSION, input={"text": "d"})
        assert (await client_a.predictions.async_get(mine.id)).id == mine.id
        for call in (client_d.predictions.async_get, client_d.predictions.async_cancel):
            with pytest.raises(ReplicateError) as refused:
                await call(mine.id)
            assert refused.value.status == 404
        assert [p.id for p in (await client_a.predictions.async_list()).results] == [mine.id]
        assert [p.id for p in (await client_d.predictions.async_list()).results] == [theirs.id]
        assert (await client_a.predictions.async_cancel(mine.id)).status in {"starting",
                                                                             "canceled"}
    finally:
        for client in (client_a, client_d):
            await client._async_client.aclose()


async def test_one_tenant_answers_as_before(gateway: GatewayHarness):
    created = await gateway.create(ECHO)
    assert (await gateway.store.get(created["id"])).tenant == "default"
    listed = await (await gateway.client.get("/v1/predictions", headers=D)).json()
    assert [p["id"] for p in listed["results"]] == [created["id"]]
    secret = await (await gateway.client.get("/v1/webhooks/default/secret", headers=D)).json()
    assert secret["key"] == gateway.app[keys.SIGNING_SECRET]
