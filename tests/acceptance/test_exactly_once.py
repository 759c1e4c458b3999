"""Exactly one completion event per prediction (docs/architecture.md, invariant 3), counted
at a receiver.

In process, on every backend: many concurrent finalizer calls for each job, and two
delivery loops claiming from one store. Across processes, on PostgreSQL: two real
``cutover serve`` processes share one database and race on duplicate provider webhooks.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from adapters.fake import FakeAdapter
from contracts.job import JobState, replicate_status
from contracts.snapshot import ProviderSnapshot
from gateway import retry
from gateway.app import _FINALIZER, WEBHOOK_POLICY
from gateway.assembly import webhook_signer
from gateway.http import keys
from gateway.notify import Notifier
from gateway.store.deliveries import DeliveryQueue
from gateway.store.engine import db
from gateway.store.schema import jobs, outbox
from gateway.webhooks.delivery import Delivery
from gateway.webhooks.post import open_session
from tests.support.databases import BACKENDS, database_url_for
from tests.support.gateway import TOKEN, VERSION, GatewayHarness, settings_dict
from tests.support.outbox import delivery_loop, events_loop, outbox_rows, start_job
from tests.support.process import GatewayProcess, listen_port
from tests.support.receiver import Receiver, validate_with_replicate
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

OUTCOMES = [JobState.COMPLETED, JobState.FAILED, JobState.CANCELED]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


def assert_one_completed_each(receiver: Receiver, job_ids: list[str]) -> None:
    by_prediction = Counter(r.payload["id"] for r in receiver.received)
    by_webhook_id = Counter(r.webhook_id for r in receiver.received)
    assert len(receiver.received) == len(job_ids)
    assert by_prediction == Counter(job_ids)
    assert len(by_webhook_id) == len(job_ids) and set(by_webhook_id.values()) == {1}
    assert {r.payload["status"] for r in receiver.received} <= {"succeeded", "failed", "canceled"}


# --- in process ---------------------------------------------------------------------------


async def test_concurrent_finalize_calls_yield_one_terminal_state_and_one_event(
    gateway: GatewayHarness, receiver: Receiver
) -> None:
    job_ids = [await start_job(gateway, receiver.url(), ["completed"]) for _ in range(6)]
    finalizer = gateway.app[_FINALIZER]

    async def observe(job_id: str, n: int) -> None:
        state = OUTCOMES[n % 3]
        snapshot = ProviderSnapshot(
            provider_job_id=FakeAdapter.provider_job_id(job_id),
            state=state,
            raw_status=state.value,
            output=f"out-{n}" if state is JobState.COMPLETED else None,
            error="failed" if state is JobState.FAILED else None,
        )
        await finalizer.finalize(await gateway.store.get(job_id), snapshot)

    await asyncio.gather(*(observe(job_id, n) for job_id in job_ids for n in range(24)))
    await gateway.settle()

    assert_one_completed_each(receiver, job_ids)
    rows = await outbox_rows(gateway.store.engine)
    assert Counter(r.job_id for r in rows if r.event == "completed") == Counter(job_ids)
    for got in receiver.received:
        final = await gateway.get(got.payload["id"])
        assert got.payload == final  # what was sent is what the store holds


async def test_two_delivery_loops_never_send_a_row_twice(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"max_concurrency": 4})
    job_ids = [await start_job(gateway, receiver.url(), ["completed"]) for _ in range(24)]
    for job_id in job_ids:
        assert await gateway.deliver(job_id, JobState.COMPLETED, output=job_id) == 200
    one = delivery_loop(gateway)
    settings = gateway.app[keys.SETTINGS]
    while await events_loop(gateway).run_once():
        pass
    async with open_session(gateway.app[WEBHOOK_POLICY], timeout_s=10, max_concurrency=4) as http:
        queue = DeliveryQueue(gateway.store.engine, owner="another-process", lease_s=30)
        other = Delivery(  # a second process's loop: another owner, the same store
            queue=queue,
            http=http,
            signer=webhook_signer(gateway.app[keys.SIGNING_SECRET], settings.webhooks),
            schedule=retry.Schedule((60.0,)),
            notifier=Notifier(),
            max_concurrency=4,
            interval_s=0.05,
        )
        while sum(await asyncio.gather(*(loop.run_once() for loop in (one, other) * 2))):
            pass
    assert_one_completed_each(receiver, job_ids)


# --- two processes, one PostgreSQL database ------------------------------------------------


def process_config(database_url: str, workdir: Path) -> dict[str, Any]:
    port = listen_port()
    config = settings_dict(
        database_url,
        str(workdir / "assets"),
        gateway={"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"},
        providers={"fake": {"kind": "fake", "max_concurrency": 1000}},
    )
    config["gateway"]["loop_interval_s"] = 0.1
    return config


def fake_webhook(job_id: str, output: str, logs: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"id": FakeAdapter.provider_job_id(job_id), "status": "completed", "output": output,
         "logs": logs}
    ).encode()  # fmt: skip
    signature = hmac.new(b"fake-secret", body, hashlib.sha256).hexdigest()
    return body, {"x-fake-signature": signature, "content-type": "application/json"}


@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected")
async def test_two_gateway_processes_on_postgresql_deliver_one_completed_per_prediction(
    tmp_path: Path, receiver: Receiver
) -> None:
    predictions, observations = 50, 8
    async with database_url_for("postgres", tmp_path) as database_url:
        first = GatewayProcess(process_config(database_url, tmp_path), tmp_path / "a")
        second = GatewayProcess(process_config(database_url, tmp_path), tmp_path / "b")
        await asyncio.to_thread(first.start)  # the first one migrates the empty database
        engine = db.create_engine(database_url)
        try:
            await asyncio.to_thread(second.start)
            await race(first, second, engine, receiver, predictions, observations)
        finally:
            await asyncio.gather(asyncio.to_thread(first.stop), asyncio.to_thread(second.stop))
            await engine.dispose()


async def race(
    first: GatewayProcess,
    second: GatewayProcess,
    engine: Any,
    receiver: Receiver,
    predictions: int,
    observations: int,
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=30, headers=auth, limits=limits) as http:
        secrets = {(await http.get(f"{p.url}/v1/webhooks/default/secret")).json()["key"]
                   for p in (first, second)}  # fmt: skip
        assert len(secrets) == 1  # both processes sign with the one stored secret

        async def token_of(job_id: str) -> str:
            query = sa.select(jobs.c.callback_token).where(jobs.c.id == job_id)
            async with engine.connect() as conn:
                return str((await conn.execute(query)).scalar_one())

        async def fire(job_id: str, token: str, k: int) -> None:
            # k < 2: byte-identical duplicates; the rest differ (distinct provider events).
            body, headers = fake_webhook(job_id, f"out-{job_id}", f"obs {max(k, 1)}")
            process = (first, second)[k % 2]
            url = f"{process.url}/provider-webhooks/fake/{job_id}/{token}"
            response = await http.post(url, content=body, headers=headers)
            assert response.status_code == 200, response.text

        async def one(n: int) -> str:
            # Created on one process, then observed at once on both, racing each other,
            # the dispatcher and the pollers (a poll by the process that did not submit
            # the job reports it lost: failed).
            body = {"version": VERSION, "input": {"prompt": f"p{n}"}, "webhook": receiver.url()}
            created = await http.post(f"{(first, second)[n % 2].url}/v1/predictions", json=body)
            assert created.status_code == 201, created.text
            job_id = str(created.json()["id"])
            token = await token_of(job_id)
            await asyncio.gather(*(fire(job_id, token, k) for k in range(observations)))
            return job_id

        job_ids = list(await asyncio.gather(*(one(n) for n in range(predictions))))

        async def all_sent() -> bool:
            query = sa.select(outbox.c.status, sa.func.count()).group_by(outbox.c.status)
            async with engine.connect() as conn:
                counts = dict((await conn.execute(query)).all())
            return counts == {"delivered": predictions}

        await wait_until(all_sent, 60, what="every completed event delivered", interval_s=0.1)
        finals = {j: (await http.get(f"{first.url}/v1/predictions/{j}")).json() for j in job_ids}

    assert_one_completed_each(receiver, job_ids)
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(outbox))).all()
        states = dict((await conn.execute(sa.select(jobs.c.id, jobs.c.state))).all())
    assert Counter((r.job_id, r.event) for r in rows) == Counter((j, "completed") for j in job_ids)
    assert {r.attempts for r in rows} == {1}
    (secret,) = secrets
    for got in receiver.received:
        validate_with_replicate(got, secret)
        job_id = got.payload["id"]
        assert got.payload["status"] == replicate_status(JobState(states[job_id]))
        # The same snapshot as the store holds (urls name the process that finished it).
        assert {**got.payload, "urls": None} == {**finals[job_id], "urls": None}
