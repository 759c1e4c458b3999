"""The read path (docs/benchmarks.md): GET and list without the write lock, finished
predictions' bytes made once, and still the truth across processes sharing one store.

Two in-process apps on one database stand for two gateway processes: each has its own
reader and its own cache of finished bodies.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

BODY = {"version": VERSION, "input": {"text": "héllo"}}


async def raw_get(gateway: GatewayHarness, job_id: str) -> bytes:
    response = await gateway.client.get(f"/v1/predictions/{job_id}", headers=gateway.headers)
    assert response.status == 200
    assert response.content_type == "application/json"
    return await response.read()


async def listing(gateway: GatewayHarness) -> dict[str, Any]:
    response = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    assert response.status == 200
    return await response.json()


async def test_a_prediction_finished_by_another_process_reads_finished(make_gateway: Any) -> None:
    first: GatewayHarness = await make_gateway()
    second: GatewayHarness = await make_gateway()
    created = await first.create(BODY)
    job_id = created["id"]
    assert (await second.get(job_id))["status"] == "starting"  # read, not kept
    await first.settle()
    assert await first.deliver(job_id, JobState.COMPLETED, output="done") == 200
    await first.settle()
    seen = await second.get(job_id)
    assert seen["status"] == "succeeded"
    assert seen["output"] == "done"
    assert seen["input"] == {"text": "héllo"}
    assert await raw_get(second, job_id) == await raw_get(second, job_id)
    assert await raw_get(first, job_id) == await raw_get(second, job_id)
    page = await listing(second)
    assert [p["status"] for p in page["results"]] == ["succeeded"]
    assert page["results"][0] == seen


async def test_get_and_list_agree_with_the_create_response(gateway: GatewayHarness) -> None:
    ids = [(await gateway.create(BODY))["id"] for _ in range(3)]
    page = await listing(gateway)
    assert [p["id"] for p in page["results"]] == ids[::-1]
    assert page["next"] is None and page["previous"] is None
    for prediction in page["results"]:
        assert prediction == await gateway.get(prediction["id"])


async def test_unknown_and_malformed_ids_are_404(gateway: GatewayHarness) -> None:
    for job_id in ("a" * 26, "nope", "%00"):
        response = await gateway.client.get(f"/v1/predictions/{job_id}", headers=gateway.headers)
        assert response.status == 404
        assert response.content_type == "application/problem+json"


async def test_integers_beyond_64_bits_come_back_intact(gateway: GatewayHarness) -> None:
    big = {"version": VERSION, "input": {"n": 2**70, "m": -(2**65)}}
    created = await gateway.create(big)
    assert created["input"] == big["input"]
    assert (await gateway.get(created["id"]))["input"] == big["input"]
    assert (await listing(gateway))["results"][0]["input"] == big["input"]
