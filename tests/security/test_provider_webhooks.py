"""Forged, replayed, stale and truncated provider webhooks never change a job.

1,000 tries against two jobs (one running, one finished): random URL tokens and
signatures, a missing signature, a validly signed body cut short, a body signed for
another job, the wrong provider in the path, an earlier event replayed after the end,
an older state validly signed. No answer is a 5xx, and the jobs' rows and their outbox
are what they were before the first try.
"""

from __future__ import annotations

import random
import secrets
from collections import Counter
from typing import Any

import sqlalchemy as sa

from adapters.fake import SIGNATURE_HEADER
from contracts.job import JobState
from gateway.store.schema import jobs, outbox
from tests.support.gateway import VERSION, GatewayHarness

TRIES = 1000
_FIELDS = ("state", "raw_status", "output", "logs", "error", "provider_job_id", "started_at",
           "completed_at", "cancel_requested_at")


async def _rows(gateway: GatewayHarness) -> tuple[list[Any], list[Any]]:
    columns = [jobs.c[name] for name in ("id", *_FIELDS)]
    async with gateway.store.engine.connect() as conn:
        job_rows = (await conn.execute(sa.select(*columns).order_by(jobs.c.id))).all()
        sent = (await conn.execute(
            sa.select(outbox.c.job_id, outbox.c.event).order_by(outbox.c.id)
        )).all()
    return [tuple(r) for r in job_rows], [tuple(r) for r in sent]


async def _job(gateway: GatewayHarness, **input: Any) -> str:
    body = {"version": VERSION, "input": {"prompt": "x", **input},
            "webhook": "http://127.0.0.1:9/hook"}
    prediction = await gateway.create(body)
    await gateway.settle()
    return str(prediction["id"])


async def test_forged_replayed_stale_and_truncated_webhooks_never_change_a_job(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "max_concurrency": 4}})
    rng = random.Random(9)
    fake = gateway.fake
    running, done = await _job(gateway), await _job(gateway)
    fake.set_state(running, JobState.RUNNING, logs="step 1")  # what its polls will say
    fake.set_state(done, JobState.COMPLETED, output="final", logs="ok")
    assert await gateway.deliver(running, JobState.RUNNING, logs="step 1") == 200
    assert await gateway.deliver(done, JobState.RUNNING, logs="step 1") == 200
    assert await gateway.deliver(done, JobState.COMPLETED, output="final", logs="ok") == 200
    await gateway.settle()
    before = await _rows(gateway)
    tokens = {job: (await gateway.store.callback_token(job))[1] for job in (running, done)}  # type: ignore[index]
    replay = fake.webhook_body(done, JobState.RUNNING, logs="step 1")

    def attack(kind: str, job: str) -> tuple[str, bytes, dict[str, str]]:
        url = f"/provider-webhooks/fake/{job}/{tokens[job]}"
        state = rng.choice([JobState.COMPLETED, JobState.FAILED, JobState.CANCELED])
        body = fake.webhook_body(job, state, output=secrets.token_hex(4))
        if kind == "forged token":
            forged = f"/provider-webhooks/fake/{job}/{secrets.token_urlsafe(32)}"
            return forged, body, fake.sign(body)
        if kind == "forged signature":
            return url, body, {SIGNATURE_HEADER: secrets.token_hex(32)}
        if kind == "unsigned":
            return url, body, {}
        if kind == "truncated":
            return url, body[: rng.randrange(1, len(body))], fake.sign(body)
        if kind == "other job's body":
            other = fake.webhook_body(running if job == done else done, state, output="x")
            return url, other, fake.sign(other)
        if kind == "wrong provider":
            return f"/provider-webhooks/cog/{job}/{tokens[job]}", body, fake.sign(body)
        if kind == "replayed":
            return f"/provider-webhooks/fake/{done}/{tokens[done]}", replay, fake.sign(replay)
        # An older state, validly signed, for the finished job (for a running one: below).
        stale = fake.webhook_body(done, JobState.QUEUED)
        return f"/provider-webhooks/fake/{done}/{tokens[done]}", stale, fake.sign(stale)

    kinds = ["forged token", "forged signature", "unsigned", "truncated", "other job's body",
             "wrong provider", "replayed", "stale"]
    answers: Counter[tuple[str, int]] = Counter()
    for attempt in range(TRIES):
        kind = kinds[attempt % len(kinds)]
        url, body, headers = attack(kind, rng.choice([running, done]))
        response = await gateway.client.post(url, data=body, headers=headers)
        answers[(kind, response.status)] += 1
        if attempt % 100 == 99:
            await gateway.settle()
    await gateway.settle()
    assert await _rows(gateway) == before
    assert not [k for k in answers if k[1] >= 500], answers
    refused = {k for k, _ in answers} - {"replayed", "stale", "other job's body"}
    assert all(status in (401, 404) for kind, status in answers if kind in refused), answers
    assert sum(answers.values()) == TRIES


async def test_a_stale_signed_event_moves_nothing_backwards(make_gateway: Any) -> None:
    gateway = await make_gateway()
    job = await _job(gateway)
    gateway.fake.set_state(job, JobState.RUNNING, output=["a", "b"], logs="2")
    assert await gateway.deliver(job, JobState.RUNNING, output=["a", "b"], logs="2") == 200
    await gateway.settle()
    before = await _rows(gateway)
    assert await gateway.deliver(job, JobState.QUEUED, output=["a"], logs="1") == 200
    await gateway.settle()
    assert await _rows(gateway) == before
