"""GET of an in-flight prediction: its JSON made once per row version, never stale
(docs/lifecycle.md, "Reads of a prediction").

Two in-process apps on one database stand for two gateway processes (each has its own
reader and its own kept bodies), with different public URLs; tenants as in
test_tenants.py. Every change of a job's row raises ``jobs.row_version`` (a trigger), so a
GET after any change, made by either app, shows it, with the URLs of the app asked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.http import keys
from gateway.store.schema import jobs
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL (the trigger) is the point

BODY = {"version": VERSION, "input": {"text": "poll me"}}
TOKEN_A = "r8_tenant_a_token"  # a test value, not a credential
TENANTS = [{"name": "a", "api_tokens": [TOKEN_A]}]
A = {"Authorization": f"Bearer {TOKEN_A}"}
D = {"Authorization": f"Bearer {TOKEN}"}


async def two_apps(make_gateway: Any) -> tuple[GatewayHarness, GatewayHarness]:
    first = await make_gateway(gateway={"public_url": "https://one.gateway.test"},
                               tenants=TENANTS)
    second = await make_gateway(gateway={"public_url": "https://two.gateway.test/base"},
                                tenants=TENANTS)
    return first, second


async def get(gw: GatewayHarness, job_id: str, headers: dict[str, str] = D) -> dict[str, Any]:
    response = await gw.client.get(f"/v1/predictions/{job_id}", headers=headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def row_version(gw: GatewayHarness, job_id: str) -> int:
    async with gw.store.engine.connect() as conn:
        query = sa.select(jobs.c.row_version).where(jobs.c.id == job_id)
        return int((await conn.execute(query)).scalar_one())


async def test_every_update_of_a_row_raises_its_version(gateway: GatewayHarness) -> None:
    job_id = (await gateway.create(BODY))["id"]
    before = await row_version(gateway, job_id)
    async with gateway.store.engine.begin() as conn:  # any UPDATE, even one the store
        await conn.execute(jobs.update().where(jobs.c.id == job_id)  # never makes
                           .values(logs="set by hand"))
    assert await row_version(gateway, job_id) == before + 1
    async with gateway.store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE jobs SET attempts = attempts WHERE id = :id"),
                           {"id": job_id})
    assert await row_version(gateway, job_id) == before + 2
    assert (await get(gateway, job_id))["logs"] == "set by hand"


async def test_a_get_after_each_change_shows_it_in_either_process(make_gateway: Any) -> None:
    first, second = await two_apps(make_gateway)
    job_id = (await first.create(BODY))["id"]
    for gw in (first, second):  # both keep the body of this version
        assert (await get(gw, job_id))["status"] == "starting"
        assert (await get(gw, job_id))["status"] == "starting"
    await first.settle()
    steps: list[tuple[JobState, dict[str, Any], dict[str, Any]]] = [
        (JobState.RUNNING, {"logs": "step 1\n"}, {"status": "processing", "logs": "step 1\n"}),
        (JobState.RUNNING, {"logs": "step 1\nstep 2\n"}, {"logs": "step 1\nstep 2\n"}),
        (JobState.COMPLETED, {"output": "DONE", "logs": "step 1\nstep 2\n"},
         {"status": "succeeded", "output": "DONE"}),
    ]
    for n, (state, fields, shown) in enumerate(steps):
        applier = (first, second)[n % 2]  # the change made by one process, then the other
        assert await applier.deliver(job_id, state, **fields) == 200
        await applier.settle()
        for gw in (first, second):
            seen = await get(gw, job_id)
            assert {k: seen[k] for k in shown} == shown, (n, gw is first)


async def test_urls_are_the_asking_process_s_own(make_gateway: Any) -> None:
    first, second = await two_apps(make_gateway)
    job_id = (await first.create(BODY))["id"]
    for _ in range(2):  # the first GET renders, the second serves what was kept
        one, two = await get(first, job_id), await get(second, job_id)
        assert one["urls"]["get"] == f"https://one.gateway.test/v1/predictions/{job_id}"
        assert one["urls"]["cancel"] == f"https://one.gateway.test/v1/predictions/{job_id}/cancel"
        assert two["urls"]["get"] == f"https://two.gateway.test/base/v1/predictions/{job_id}"
        assert one["urls"]["stream"].startswith(f"https://one.gateway.test/streams/{job_id}?t=")
        assert two["urls"]["stream"].startswith(
            f"https://two.gateway.test/base/streams/{job_id}?t=")
        assert {k: v for k, v in one.items() if k != "urls"} == {
            k: v for k, v in two.items() if k != "urls"}


async def test_a_kept_body_is_never_served_to_another_tenant(make_gateway: Any) -> None:
    first, _ = await two_apps(make_gateway)
    theirs = (await first.create(BODY))["id"]  # tenant default
    mine_response = await first.client.post("/v1/predictions", json=BODY, headers=A)
    mine = (await mine_response.json())["id"]
    assert (await get(first, theirs))["id"] == theirs  # kept now
    assert (await get(first, mine, A))["id"] == mine
    for job_id, other in ((theirs, A), (mine, D)):
        response = await first.client.get(f"/v1/predictions/{job_id}", headers=other)
        assert response.status == 404
    stream_d = (await get(first, theirs))["urls"]["stream"]
    stream_a = (await get(first, mine, A))["urls"]["stream"]
    assert stream_d.split("?t=")[1] != stream_a.split("?t=")[1]  # each tenant's secret


async def fresh(gw: GatewayHarness, job_id: str) -> dict[str, Any]:
    """The prediction rendered from the row as it is now, with nothing kept."""
    service = gw.app[keys.PREDICTIONS]
    return json.loads(service.render(await gw.store.get(job_id)))


async def test_a_cancel_is_shown_by_the_next_get(make_gateway: Any) -> None:
    first, second = await two_apps(make_gateway)
    job_id = (await first.create(BODY))["id"]
    await first.settle()
    assert await first.deliver(job_id, JobState.RUNNING, logs="working\n") == 200
    await first.settle()
    assert (await get(second, job_id))["status"] == "processing"  # kept by the second
    response = await first.client.post(f"/v1/predictions/{job_id}/cancel", headers=D)
    assert response.status == 200
    await first.settle()  # the cancel sent to the provider, which confirms it
    assert (await first.store.get(job_id)).cancel_requested_at is not None
    assert await get(second, job_id) == await fresh(second, job_id)
    assert await first.deliver(job_id, JobState.CANCELED) == 200
    await first.settle()
    for gw in (second, first):
        assert (await get(gw, job_id))["status"] == "canceled"
