"""Issue 6 faults 8 (first three items) and 9: a webhook that overtakes its submit, a
receiver URL that breaks the URL library, a 410 from a long URL, and an input the
outbound JSON cannot carry.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from contracts.errors import UpstreamRejected
from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot, SubmitRequest
from gateway.app import WEBHOOK_POLICY, create_app
from gateway.webhooks import ssrf
from tests.support.faults import loop_named
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import delivery_loop, observe, outbox_rows, start_job
from tests.support.receiver import Receiver

TERMINAL = {"succeeded", "failed", "canceled"}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


# --- fault 8 ----------------------------------------------------------------------------


async def test_fault_08_a_webhook_that_overtakes_its_submit(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast model's terminal webhook is applied before the submit is recorded: the job
    keeps its provider id and nobody asks the provider to cancel it."""
    submit = gateway.fake.submit

    async def fast_model(request: SubmitRequest) -> ProviderSnapshot:
        snapshot = await submit(request)
        gateway.fake.set_state(request.job_id, JobState.COMPLETED, output="fast")
        await observe(gateway, request.job_id, JobState.COMPLETED, output="fast")
        return snapshot

    monkeypatch.setattr(gateway.fake, "submit", fast_model)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    done = await gateway.get(prediction["id"])
    assert (done["status"], done["output"]) == ("succeeded", "fast")
    job = await gateway.store.get(prediction["id"])
    assert job.provider_job_id == f"fake-{prediction['id']}"
    assert gateway.fake.cancel_calls == []


class _Loopback:
    async def resolve(self, host: str, port: int) -> list[str]:
        return ["127.0.0.1"]


@pytest.fixture
async def make_looped(
    make_settings: Callable[..., Any], aiohttp_client: Callable[..., Any]
) -> Callable[..., Any]:
    """A gateway whose webhook names all resolve to 127.0.0.1."""

    async def make(**sections: Any) -> GatewayHarness:
        settings = make_settings(**sections)
        app = create_app(settings, run_loops=False)
        hosts = settings.webhooks.allow_hosts
        app[WEBHOOK_POLICY] = ssrf.WebhookTargetPolicy(hosts, resolver=_Loopback())
        client: TestClient = await aiohttp_client(app)
        return GatewayHarness(app=app, client=client)

    return make


async def test_fault_08_a_url_the_url_library_cannot_read_does_not_crash_delivery(
    make_looped: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """``xn--zz.test`` passes the create-time checks, is delivered to, and yarl cannot
    decode its host: the outcome is stored and logged without a crash."""
    gateway = await make_looped(webhooks={"allow_hosts": ["127.0.0.1", "xn--zz.test"]})
    job_id = await start_job(gateway, f"http://xn--zz.test:{receiver.port}/hook", ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    caplog.set_level(logging.INFO)
    await delivery_loop(gateway).run_once()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert row.status == "delivered" and len(receiver.received) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_fault_08_a_410_from_a_long_url_is_remembered(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway()
    url = receiver.url("/gone?pad=" + "x" * 2100)
    receiver.reply(410)
    first = await start_job(gateway, url, ["completed"])
    await observe(gateway, first, JobState.COMPLETED, output="x")
    await gateway.settle()
    second = await start_job(gateway, url, ["completed"])
    await observe(gateway, second, JobState.COMPLETED, output="y")
    await gateway.settle()
    assert len(receiver.received) == 1
    (row,) = await outbox_rows(gateway.store.engine, second)
    assert row.status == "dead" and row.attempts == 0


# --- fault 9 ----------------------------------------------------------------------------


async def test_fault_09_an_input_json_cannot_carry_ends_alone(
    gateway: GatewayHarness, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``10**309`` written out in full: refused at create (422), or its prediction ends
    on its own; the cancels of other predictions are still sent."""
    submit = gateway.fake.submit

    async def refuses_huge(request: SubmitRequest) -> ProviderSnapshot:
        if "huge" in request.input:
            raise UpstreamRejected("input.huge: value out of range")
        return await submit(request)

    monkeypatch.setattr(gateway.fake, "submit", refuses_huge)
    other = await start_job(gateway, receiver.url(), ["completed"])
    huge = "1" + "0" * 309
    raw = f'{{"version": "{VERSION}", "input": {{"huge": {huge}}}, "webhook": "{receiver.url()}"}}'
    response = await gateway.client.post(
        "/v1/predictions",
        data=raw.encode(),
        headers={**gateway.headers, "Content-Type": "application/json"},
    )
    assert response.status in (201, 422), await response.text()
    bad = (await response.json())["id"] if response.status == 201 else None
    await _rounds(gateway)
    for job_id in [other, bad]:
        if job_id is not None:
            await gateway.client.post(f"/v1/predictions/{job_id}/cancel", headers=gateway.headers)
    await _rounds(gateway)
    assert f"fake-{other}" in gateway.fake.cancel_calls
    await observe(gateway, other, JobState.CANCELED)  # the provider confirms
    assert (await gateway.get(other))["status"] == "canceled"
    if bad is not None:
        assert (await gateway.get(bad))["status"] in TERMINAL


async def _rounds(gateway: GatewayHarness, n: int = 5) -> None:
    """Rounds of every loop, errors kept inside the round as ``Loop.run`` does."""
    for _ in range(n):
        for name in ("dispatcher", "events", "poller", "reaper", "delivery"):
            try:
                await loop_named(gateway, name).run_once()
            except Exception:
                logging.getLogger("test").exception("round_failed")
