"""Issue 6, "Done when": 500 predictions under injected faults end in the state their
provider reported, with exactly one ``completed`` webhook each.

Faults at every step: transient store errors from the driver (2 % of statements, on
every loop and on the API), and adapter exceptions (submit, fetch, cancel and webhook
parsing raise ``RuntimeError`` or ``UpstreamRetryable``, sometimes after the provider
already acted). The provider is simulated tick by tick: each job runs (its progress
webhooks arrive late and out of order), then succeeds, fails, or is canceled by the app;
its terminal webhook is retried until stored, or lost so that only polling finds it.
``CUTOVER_SOAK_N`` changes the number of predictions. It runs for minutes on a busy
machine, so it is a tier of its own: ``make soak`` (``CUTOVER_SOAK=1``), not ``make test``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from contracts.errors import UpstreamRetryable
from contracts.job import JobState
from tests.support.faults import StoreFaults, engine_of, loop_named
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.receiver import Receiver

N = int(os.environ.get("CUTOVER_SOAK_N", "500"))
pytestmark = [pytest.mark.every_backend, pytest.mark.skipif(
    not os.environ.get("CUTOVER_SOAK"), reason="the soak runs with make soak (CUTOVER_SOAK=1)"
)]
LOOPS = ("dispatcher", "events", "poller", "reaper", "delivery")
STATUS = {
    JobState.COMPLETED: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELED: "canceled",
}
log = logging.getLogger("soak")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


@dataclass
class Script:
    """What the simulated provider does with one job."""

    n: int
    fate: JobState
    by_webhook: bool
    step: int = 0
    pending: list[tuple[JobState, dict[str, Any]]] = field(default_factory=list)


class Chaos:
    """Random adapter exceptions around the fake provider's methods."""

    def __init__(self, gateway: GatewayHarness, rng: random.Random, rate: float) -> None:
        self.rng, self.rate, self.raised = rng, rate, Counter[str]()
        fake = gateway.fake
        for name in ("submit", "fetch", "cancel"):
            setattr(fake, name, self._async(name, getattr(fake, name)))
        fake.parse_webhook = self._sync("parse_webhook", fake.parse_webhook)  # type: ignore

    def _error(self, name: str) -> Exception:
        self.raised[name] += 1
        if self.rng.random() < 0.5:
            return RuntimeError(f"injected {name} crash")
        return UpstreamRetryable(f"injected {name} outage")

    def _async(self, name: str, fn: Any) -> Any:
        async def wrapper(*args: Any) -> Any:
            if self.rate and self.rng.random() < self.rate:
                raise self._error(name)
            result = await fn(*args)
            if self.rate and self.rng.random() < self.rate / 2:  # acted, then the answer lost
                raise self._error(name)
            return result

        return wrapper

    def _sync(self, name: str, fn: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            if self.rate and self.rng.random() < self.rate:
                raise self._error(name)
            return fn(*args)

        return wrapper


async def _call(
    gateway: GatewayHarness, method: str, path: str, headers: Any = None, **kw: Any
) -> Any:
    headers = {**gateway.headers, **(headers or {})}
    response = await gateway.client.request(method, path, headers=headers, **kw)
    return response.status, (await response.json() if response.status < 300 else None)


async def create_all(gateway: GatewayHarness, url: str) -> list[str]:
    ids = []
    for n in range(N):
        body = {"version": VERSION, "input": {"n": n}, "webhook": url,
                "webhook_events_filter": ["completed"]}
        while True:
            status, created = await _call(
                gateway, "POST", "/v1/predictions", json=body,
                headers={"Idempotency-Key": f"soak-{n}"},
            )
            if status == 201:
                ids.append(created["id"])
                break
    return ids


async def _webhook(gateway: GatewayHarness, job_id: str, state: JobState, **fields: Any) -> bool:
    try:
        return await gateway.deliver(job_id, state, **fields) == 200
    except Exception:  # the store may fail under the intake too: the provider retries
        return False


async def provider_tick(gateway: GatewayHarness, scripts: dict[str, Script], rng: Any) -> None:
    fake = gateway.fake
    submitted = {r.job_id for r in fake.submitted}
    for job_id, script in scripts.items():
        if job_id not in submitted:
            continue
        snapshot = fake._snapshots.get(fake.provider_job_id(job_id))
        if script.step == 0:
            partial = [f"{script.n}-a"]
            fake.set_state(job_id, JobState.RUNNING, output=partial, logs="a\n")
            script.pending.append((JobState.QUEUED, {}))  # the first webhook, arriving last
            script.pending.insert(0, (JobState.RUNNING, {"output": partial, "logs": "a\n"}))
            script.step = 1
        elif script.step == 1 and script.fate is JobState.CANCELED:
            status, _ = await _call(gateway, "POST", f"/v1/predictions/{job_id}/cancel")
            script.step = 2 if status == 200 else 1
        elif script.step == 1:
            fields = _final(script)
            fake.set_state(job_id, script.fate, **fields)
            if script.by_webhook:
                script.pending.append((script.fate, fields))
            script.step = 2
        elif script.step == 2 and snapshot is not None and snapshot.state.terminal:
            if script.by_webhook and script.fate is JobState.CANCELED:
                script.pending.append((JobState.CANCELED, {}))
            script.step = 3
        if script.pending and rng.random() < 0.7:
            state, fields = script.pending[0]
            if await _webhook(gateway, job_id, state, **fields):
                script.pending.pop(0)


def _final(script: Script) -> dict[str, Any]:
    if script.fate is JobState.COMPLETED:
        return {"output": [f"{script.n}-a", f"{script.n}-b"], "logs": "a\nb\n"}
    return {"error": f"job {script.n} failed upstream", "logs": "a\n"}


async def gateway_round(gateway: GatewayHarness) -> None:
    for name in LOOPS:
        try:
            await loop_named(gateway, name).run_once()
        except Exception:  # the loop boundary, as Loop.run has it
            log.debug("round_failed", exc_info=True)


async def finished(gateway: GatewayHarness, ids: list[str], receiver: Receiver) -> bool:
    completed = {r.payload["id"] for r in receiver.received}
    return len(completed) == len(ids)


@pytest.mark.timeout(900)
async def test_500_predictions_under_injected_faults_end_as_their_provider_reported(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(
        gateway={"lease_s": 1.0, "cancel_resend_s": 0.5, "cancel_grace_s": 120.0},
        providers={"fake": {"kind": "fake", "max_concurrency": 64,
                            "fetch_interval_s": 0.1, "fetch_max_interval_s": 0.5}},
        webhooks={"retry_delays_s": [0.05] * 20, "max_concurrency": 32},
    )
    rng = random.Random(6)
    fates = [JobState.COMPLETED] * 6 + [JobState.FAILED] * 2 + [JobState.CANCELED] * 2
    with StoreFaults(engine_of(gateway)) as faults:
        faults.chaos(0.02, random.Random(7))
        chaos = Chaos(gateway, random.Random(8), rate=0.1)
        ids = await create_all(gateway, receiver.url())
        scripts = {
            job_id: Script(n, rng.choice(fates), by_webhook=rng.random() < 0.7)
            for n, job_id in enumerate(ids)
        }

        async def run() -> None:
            rounds = 0
            while not await finished(gateway, ids, receiver):
                await gateway_round(gateway)
                await provider_tick(gateway, scripts, rng)
                await asyncio.sleep(0.005)
                rounds += 1
                if rounds % 50 == 0:
                    done = len({r.payload["id"] for r in receiver.received})
                    steps = Counter(s.step for s in scripts.values())
                    log.warning("soak_progress %s rounds, %s completed, steps %s",
                                rounds, done, dict(steps))

        await asyncio.wait_for(run(), 600)
        faults.restore()
        chaos.rate = 0.0
    await gateway.settle()
    assert faults.raised > 0 and sum(chaos.raised.values()) > 0
    wrong = {}
    for job_id, script in scripts.items():
        prediction = await gateway.get(job_id)
        if prediction["status"] != STATUS[script.fate]:
            wrong[job_id] = (script.fate.value, prediction["status"], prediction["error"])
    assert wrong == {}, f"{len(wrong)} of {N} ended wrong: {list(wrong.values())[:5]}"
    per_prediction = Counter(r.payload["id"] for r in receiver.received)
    assert set(per_prediction) == set(ids)
    assert set(per_prediction.values()) == {1}, per_prediction.most_common(3)
    for received in receiver.received:
        assert received.payload == await gateway.get(received.payload["id"])
