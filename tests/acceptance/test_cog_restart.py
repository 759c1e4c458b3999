"""A Cog server that restarts forgets its in-flight predictions and will never send their
webhooks: the watchdog probe says so (from /health-check ``setup.started_at``), and the
gateway fails such a prediction at once instead of waiting out Cog's webhook retry
window (``lost_grace_s``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from adapters.cog import RESTART_ERROR, CogAdapter
from contracts.job import JobState
from contracts.snapshot import ProviderRef, ProviderSnapshot, SubmitRequest
from gateway.app import LOOPS
from gateway.store.schema import jobs
from tests.support.cog_server import CogServer
from tests.support.fixtures import ECHO_MODEL_DIR
from tests.support.gateway import VERSION, GatewayHarness


async def test_the_probe_reports_a_restart_of_the_real_cog_server(tmp_path):
    first = CogServer(ECHO_MODEL_DIR)
    await asyncio.to_thread(lambda: (first.start(), first.wait_ready()))
    second = CogServer(ECHO_MODEL_DIR, port=first.port)
    adapter = CogAdapter(name="cog", base_url=first.url)
    try:
        submitted_at = datetime.now(UTC)
        request = SubmitRequest(
            job_id="restart0000000000000000000",
            input={"prompt": "long", "steps": 200, "delay": 0.1},
            model="acme/echo",
            version="hidden",
        )
        await adapter.submit(request)
        ref = ProviderRef(
            job_id=request.job_id, provider_job_id=request.job_id, submitted_at=submitted_at
        )
        assert not (await adapter.fetch(ref)).lost  # running on the first server
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(lambda: (second.start(), second.wait_ready()))
        snapshot = await adapter.fetch(ref)
        assert snapshot.lost and snapshot.provider_restarted
        assert snapshot.error == RESTART_ERROR
    finally:
        await adapter.aclose()
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(second.stop)


async def test_a_job_lost_to_a_provider_restart_fails_without_the_grace_period(
    gateway: GatewayHarness,
):
    gateway.fake.capabilities = gateway.fake.capabilities.model_copy(
        update={"lost_grace_s": 3600.0}
    )
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()

    async def restarted(ref: ProviderRef) -> ProviderSnapshot:
        return ProviderSnapshot(
            provider_job_id=ref.provider_job_id,
            state=JobState.FAILED,
            raw_status="lost",
            error=RESTART_ERROR,
            lost=True,
            provider_restarted=True,
        )

    gateway.fake.fetch = restarted  # type: ignore[method-assign]
    created_at = (await gateway.store.get(prediction["id"])).created_at
    async with gateway.store.engine.begin() as conn:
        await conn.execute(
            jobs.update().where(jobs.c.id == prediction["id"]).values(next_attempt_at=created_at)
        )
    poller = next(loop for loop in gateway.app[LOOPS] if loop.name == "poller")
    assert await poller.run_once() == 1
    done = await gateway.get(prediction["id"])
    assert done["status"] == "failed" and done["error"] == RESTART_ERROR
