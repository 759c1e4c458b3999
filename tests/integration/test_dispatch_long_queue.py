"""The dispatch claim with a queue longer than one round reads (gateway/store/dispatching.py,
SMALL_ROUND: its first statement reads at most that many waiting jobs, in no order): two
processes claiming at once submit each job at most once, never more than max_concurrency,
and the fair order still serves a token that queued behind another's flood (docs/limits.md,
"Fair queueing")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.store.dispatching import SMALL_ROUND
from tests.support.faults import loop_named
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

FLOOD = "r8_flood_token"  # test values, not credentials
QUIET = "r8_quiet_token"
CAPACITY = 10


async def create_as(gateway: GatewayHarness, token: str, prompt: str) -> str:
    response = await gateway.client.post(
        "/v1/predictions",
        json={"version": VERSION, "input": {"prompt": prompt}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status == 201, await response.text()
    return str((await response.json())["id"])


async def test_a_queue_longer_than_a_round_is_claimed_fairly_and_once_by_two_processes(
    make_gateway: Any,
) -> None:
    conf: dict[str, Any] = {
        "gateway": {"named_api_tokens": {"flood": FLOOD, "quiet": QUIET}},
        "providers": {"fake": {"kind": "fake", "max_concurrency": CAPACITY}},
    }
    one, two = await make_gateway(**conf), await make_gateway(**conf)
    flood = [await create_as(one, FLOOD, f"f{n}") for n in range(SMALL_ROUND + 40)]
    quiet = [await create_as(one, QUIET, f"q{n}") for n in range(3)]
    for _ in range(3):
        await asyncio.gather(
            loop_named(one, "dispatcher").run_once(), loop_named(two, "dispatcher").run_once()
        )
    submitted = [r.job_id for r in one.fake.submitted + two.fake.submitted]
    assert len(submitted) == len(set(submitted)) == CAPACITY, submitted
    assert set(quiet) <= set(submitted)  # not behind the flood's 552 jobs
    assert set(submitted) - set(quiet) <= set(flood[:CAPACITY])  # the flood's oldest
