"""The process's lease owner fits the store's ``lease_owner`` columns (64 characters)
whatever the host's name (docs/reliability.md, "Lease owners"): a Kubernetes pod name
may be 63 characters, and PostgreSQL refused every claim of a longer owner (SQLite does
not check lengths). Both backends: a prediction created, dispatched, polled, finished by
its webhook and its app's webhook delivered, on a gateway whose host name is 63
characters long.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import VERSION
from tests.support.outbox import delivery_loop, observe, start_job
from tests.support.receiver import Receiver

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

# <deployment>-<replicaset hash>-<pod hash>, the longest a pod name may be
LONG_HOST = "payments-inference-gateway-canary-eu-west-1abc-5c9b7d8f64-x2k9p"


async def test_a_63_character_host_name_claims_leases_and_finishes_jobs(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(LONG_HOST) == 63
    monkeypatch.setattr(socket, "gethostname", lambda: LONG_HOST)
    gateway = await make_gateway()
    async with Receiver() as app_hooks:
        by_webhook = await start_job(gateway, app_hooks.url(), events=["completed"])
        await observe(gateway, by_webhook, JobState.COMPLETED, output="done")
        assert await delivery_loop(gateway).run_once() == 1
        sent = await app_hooks.wait_for(1)
        assert [r.payload["status"] for r in sent] == ["succeeded"]
    polled = str((await gateway.create({"version": VERSION, "input": {"prompt": "x"}}))["id"])
    await gateway.settle()  # dispatched (a lease on the job)
    gateway.fake.set_state(polled, JobState.COMPLETED, output="polled")
    gateway.clock.advance(10)  # the next poll is due: claimed, found finished, applied
    await gateway.settle()
    assert (await gateway.get(polled))["status"] == "succeeded"
    assert (await gateway.get(by_webhook))["status"] == "succeeded"
