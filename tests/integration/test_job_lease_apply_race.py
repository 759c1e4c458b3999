"""Many finished jobs: one gateway's poll applies them while their webhooks arrive at
another gateway, whose event processor runs meanwhile (docs/lifecycle.md, "Leases during
an apply"). Whichever takes a job first applies it; the other leaves it: every output is
downloaded once, on both backends. Before the apply lease, some job of each run was
downloaded twice (its webhook applied while the poll copied it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.job import JobState
from tests.integration.test_job_lease_apply import (  # noqa: F401 (files: the fixture)
    FILE_HOSTS,
    SlowFiles,
    advance,
    files,
    loop,
)
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

JOBS = 40


async def finished_jobs(
    make_gateway: Any, server: SlowFiles
) -> tuple[GatewayHarness, GatewayHarness, dict[str, Any]]:
    """Two gateways on one store; :data:`JOBS` jobs submitted, each finished at the
    provider with a file of its own, their polls due; job id -> output."""
    first, second = [await make_gateway(providers=FILE_HOSTS) for _ in range(2)]
    body = {"version": VERSION, "input": {"prompt": "x"}}
    ids = [str((await first.create(body))["id"]) for _ in range(JOBS)]
    await first.settle()
    outputs = {job_id: {"file": server.url(job_id)} for job_id in ids}
    for job_id, output in outputs.items():
        for gateway in (first, second):
            gateway.fake.set_state(job_id, JobState.COMPLETED, output=output)
    advance(10, first, second)
    return first, second, outputs


@pytest.mark.parametrize("yield_every", [2, 3])
async def test_each_output_is_downloaded_once_whichever_applies_it(
    make_gateway: Any,
    files: SlowFiles,  # noqa: F811 (the fixture imported above)
    yield_every: int,
) -> None:
    files.delay_s = 0.01  # each copy takes a while
    files.release.set()
    first, second, outputs = await finished_jobs(make_gateway, files)

    async def webhooks() -> None:
        for n, (job_id, output) in enumerate(outputs.items()):
            assert await second.deliver(job_id, JobState.COMPLETED, output=output) == 200
            if n % yield_every == 0:
                await asyncio.sleep(0)

    async def events() -> None:
        for _ in range(200):
            await loop(second, "events").run_once()
            await asyncio.sleep(0.005)

    await asyncio.gather(loop(first, "poller").run_once(), webhooks(), events())
    advance(10, first, second)  # what waited or was left is applied now
    for _ in range(5):
        await loop(second, "events").run_once()
        await loop(first, "poller").run_once()
    for job_id in outputs:
        assert (await first.get(job_id))["status"] == "succeeded"
    assert {name: n for name, n in files.counts.items() if n != 1} == {}
    assert files.requests == JOBS
