"""The gateway's CPU per provider webhook, in process, from its receipt to its apply.

An app on a fresh database (the fake provider of the tests, no background loops); for each
of ``--jobs`` predictions, created and submitted (not timed), three verified webhooks
(two progress snapshots, then the terminal one) go through ``Intake.receive`` (the URL's
check, the signature, the store), each followed by the event processor's rounds until
one applies nothing. Prints the process's CPU time (user + system) per
webhook over that phase, and how many events the processor's rounds applied (0 when
every webhook was applied as it was stored: gateway/store/applied.py,
gateway/store/pgapplied.py). The tree measured is the one on ``PYTHONPATH``.

    PYTHONPATH=<tree> .venv/bin/python bench/webhook_apply.py [--backend postgres] [--jobs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

import gateway
from contracts.job import JobState
from gateway.app import create_app
from gateway.config import Settings
from gateway.http import keys
from tests.support.databases import migrate, sync_database
from tests.support.gateway import GatewayHarness, settings_dict
from tests.support.outbox import drain, queued_job


async def run(url: str, assets: str, jobs: int) -> tuple[float, int, int]:
    await migrate(url)
    app = create_app(Settings(**settings_dict(url, assets)), run_loops=False)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        harness = GatewayHarness(app=app, client=client)
        intake = app[keys.INTAKE]
        webhooks = processed = 0
        cpu = 0.0
        ids = []
        for _ in range(jobs):
            job_id = await queued_job(harness)  # created and submitted: not timed
            ids.append(job_id)
            provider, token = await harness.store.callback_token(job_id)  # type: ignore[misc]
            start = time.process_time()
            for state, fields in ((JobState.RUNNING, {"logs": "a\n"}),
                                  (JobState.RUNNING, {"logs": "a\nb\n"}),
                                  (JobState.COMPLETED, {"output": "done", "logs": "a\nb\n"})):
                body = harness.fake.webhook_body(job_id, state, **fields)
                await intake.receive(provider, job_id, token, harness.fake.sign(body), body)
                processed += await drain(harness)
                webhooks += 1
            cpu += time.process_time() - start
        for job_id in ids:
            assert (await harness.store.get(job_id)).state is JobState.COMPLETED
        return cpu, webhooks, processed
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp, sync_database(args.backend, Path(tmp)) as url:
        cpu, webhooks, processed = asyncio.run(run(url, str(Path(tmp) / "assets"), args.jobs))
    tree = Path(gateway.__file__).resolve().parents[1]
    print(f"tree {tree} backend {args.backend} load {load}: {webhooks} webhooks, "
          f"{1e6 * cpu / webhooks:.0f} us CPU per webhook (receipt to apply), "
          f"{processed} applied by the processor's rounds", flush=True)


if __name__ == "__main__":
    sys.exit(main())
