"""Creates committed in groups (gateway/store/creates.py): every 201 is a committed row,
and a bad row in a group fails only its own request."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def post(gateway: GatewayHarness, n: int, key: str | None = None) -> tuple[int, dict]:
    headers = dict(gateway.headers)
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"version": VERSION, "input": {"n": n}}
    response = await gateway.client.post("/v1/predictions", json=body, headers=headers)
    return response.status, await response.json()


async def test_concurrent_creates_are_all_committed_before_their_201(
    gateway: GatewayHarness,
) -> None:
    answers = await asyncio.gather(*(post(gateway, n) for n in range(60)))
    assert {status for status, _ in answers} == {201}
    for _, body in answers:  # straight from the store, not from any cache
        job = await gateway.store.get(body["id"])
        assert job.input == body["input"]


async def test_a_reused_key_in_a_group_answers_alone(gateway: GatewayHarness) -> None:
    status, first = await post(gateway, 0, key="k1")
    assert status == 201
    answers = await asyncio.gather(
        *(post(gateway, n) for n in range(1, 10)),
        post(gateway, 0, key="k1"),  # the same request again: the stored job
        post(gateway, 99, key="k1"),  # another request under the key: 409
        *(post(gateway, n) for n in range(10, 20)),
    )
    statuses = [status for status, _ in answers]
    assert statuses.count(201) == 20 and statuses.count(409) == 1
    replayed = [body for status, body in answers if status == 201 and body["id"] == first["id"]]
    assert len(replayed) == 1
    created = {body["id"] for status, body in answers if status == 201}
    for job_id in created:
        await gateway.store.get(job_id)
