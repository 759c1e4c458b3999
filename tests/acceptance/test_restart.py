"""Webhook events survive a SIGKILL of the gateway (docs/architecture.md, invariant 2).

A real ``cutover serve`` process delivers to a receiver that is failing (503) for most
predictions and holding one request open; the process is killed while those events are
pending or in flight, the receiver recovers, a new process starts on the same database,
and every event arrives. A receiver that deduplicates on ``webhook-id`` sees each once.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from adapters.fake import FakeAdapter
from gateway.store.engine import db
from gateway.store.schema import jobs, outbox
from tests.support.gateway import TOKEN, VERSION, settings_dict
from tests.support.process import GatewayProcess, listen_port
from tests.support.receiver import Receiver, Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

PREDICTIONS = 4


def config_for(database_url: str, workdir: Path) -> dict[str, Any]:
    port = listen_port()
    config = settings_dict(
        database_url,
        str(workdir / "assets"),
        gateway={"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"},
        webhooks={"retry_delays_s": [0.2] * 50, "timeout_s": 3.0},
        providers={"fake": {"kind": "fake", "max_concurrency": 100}},
    )
    config["gateway"].update(loop_interval_s=0.1, lease_s=1.0)
    return config


async def complete(http: httpx.AsyncClient, process: GatewayProcess, job_id: str, token: str):  # type: ignore[no-untyped-def]
    body = json.dumps(
        {"id": FakeAdapter.provider_job_id(job_id), "status": "completed", "output": job_id}
    ).encode()
    signature = hmac.new(b"fake-secret", body, hashlib.sha256).hexdigest()
    url = f"{process.url}/provider-webhooks/fake/{job_id}/{token}"
    response = await http.post(url, content=body, headers={"x-fake-signature": signature})
    assert response.status_code == 200, response.text


async def test_events_pending_at_a_sigkill_are_delivered_after_a_restart(
    database_url: str, tmp_path: Path
) -> None:
    config = config_for(database_url, tmp_path)
    engine = db.create_engine(database_url)
    held = asyncio.Event()
    async with Receiver() as receiver:
        # Down for everyone, and the request for /held is never answered.
        receiver.decide = lambda r: Reply(gate=held) if r.path == "/held" else Reply(503)
        process = GatewayProcess(config, tmp_path / "first")
        await asyncio.to_thread(process.start)
        try:
            job_ids = await create_and_finish(process, receiver, engine)

            async def attempted() -> bool:
                async with engine.connect() as conn:
                    rows = (await conn.execute(sa.select(outbox.c.attempts))).all()
                held_open = any(r.path == "/held" for r in receiver.received)
                return len(rows) == PREDICTIONS and all(r.attempts for r in rows) and held_open

            await wait_until(attempted, 20, what="every event attempted", interval_s=0.05)
        finally:
            await asyncio.to_thread(process.kill)  # SIGKILL: leases and retries left behind
        async with engine.connect() as conn:
            states = {r.status for r in await conn.execute(sa.select(outbox.c.status))}
        assert states == {"pending"}

        receiver.decide = None  # the receiver is healthy again
        held.set()
        restarted = GatewayProcess(config, tmp_path / "second")
        await asyncio.to_thread(restarted.start)
        try:

            async def delivered() -> bool:
                async with engine.connect() as conn:
                    statuses = (await conn.execute(sa.select(outbox.c.status))).scalars().all()
                return statuses == ["delivered"] * PREDICTIONS

            await wait_until(
                delivered, 30, what="every event delivered after the restart", interval_s=0.05
            )
        finally:
            await asyncio.to_thread(restarted.stop)
        async with engine.connect() as conn:
            msg_ids = set((await conn.execute(sa.select(outbox.c.msg_id))).scalars())
        await engine.dispose()

    seen: dict[str, str] = {}  # webhook-id -> prediction id, as a deduplicating app keeps
    for got in receiver.accepted:
        seen.setdefault(got.webhook_id, got.payload["id"])
    assert set(seen) == msg_ids
    assert sorted(seen.values()) == sorted(job_ids)  # each prediction's event once
    assert {got.payload["status"] for got in receiver.accepted} == {"succeeded"}


async def create_and_finish(process: GatewayProcess, receiver: Receiver, engine: Any) -> list[str]:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=30, headers=auth) as http:
        job_ids = []
        for n in range(PREDICTIONS):
            path = "/held" if n == 0 else f"/hook/{n}"
            body = {
                "version": VERSION,
                "input": {"prompt": f"p{n}"},
                "webhook": receiver.url(path),
                "webhook_events_filter": ["completed"],
            }
            created = await http.post(f"{process.url}/v1/predictions", json=body)
            assert created.status_code == 201, created.text
            job_ids.append(created.json()["id"])
        async with engine.connect() as conn:
            tokens = dict((await conn.execute(sa.select(jobs.c.id, jobs.c.callback_token))).all())
        for job_id in job_ids:
            await complete(http, process, job_id, tokens[job_id])
    return job_ids
