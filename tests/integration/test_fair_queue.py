"""When a provider is at capacity, waiting jobs are served fairly across API tokens and by
route priority (gateway/fairness.py, docs/limits.md)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import VERSION

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

TOKENS = {"flood": "r8_flooding_app_token", "quiet": "r8_quiet_app_token"}


async def create(gateway: Any, token: str, body: dict[str, Any]) -> str:
    response = await gateway.client.post(
        "/v1/predictions" if "version" in body else "/v1/models/acme/plain/predictions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status == 201, await response.text()
    return str((await response.json())["id"])


async def run_in_order(gateway: Any, count: int) -> list[str]:
    """Let the one slot serve ``count`` jobs; the ids in the order they were submitted."""
    order: list[str] = []
    for _ in range(count):
        await gateway.settle()
        job_id = gateway.fake.submitted[-1].job_id
        order.append(job_id)
        await gateway.deliver(job_id, JobState.COMPLETED, output="ok")
    return order


async def test_a_flooding_token_does_not_starve_another(make_gateway: Any) -> None:
    gateway = await make_gateway(
        gateway={"api_tokens": [], "named_api_tokens": TOKENS},
        providers={"fake": {"kind": "fake", "max_concurrency": 1}},
    )
    body = {"version": VERSION, "input": {"prompt": "x"}}
    flood = [await create(gateway, TOKENS["flood"], body) for _ in range(6)]
    quiet = [await create(gateway, TOKENS["quiet"], body) for _ in range(2)]
    order = await run_in_order(gateway, 5)
    assert order == [flood[0], quiet[0], flood[1], quiet[1], flood[2]]


async def test_a_higher_priority_route_goes_first(make_gateway: Any) -> None:
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 1}},
        routes=[
            {"model": "acme/echo", "version": VERSION, "provider": "fake"},
            {"model": "acme/plain", "provider": "fake", "priority": 10},
        ],
    )
    token = "r8_test_token"
    low = [await create(gateway, token, {"version": VERSION, "input": {}}) for _ in range(2)]
    high = [await create(gateway, token, {"input": {}}) for _ in range(2)]
    order = await run_in_order(gateway, 4)
    assert order == [*high, *low], (order, high, low)
