"""FakeAdapter: the scripted provider that gateway tests drive."""

from __future__ import annotations

import pytest

from adapters import fake, port
from contracts.errors import (
    CapabilityMissing,
    ContractViolation,
    ProviderBusy,
    UpstreamRejected,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest

REQUEST = SubmitRequest(job_id="j1", input={"prompt": "x"}, model="acme/echo", version="hidden")
REF = ProviderRef(job_id="j1", provider_job_id="fake-j1")


async def test_fake_satisfies_the_port_and_records_submits():
    adapter = fake.FakeAdapter(webhooks=False)
    assert isinstance(adapter, port.Adapter)
    assert adapter.capabilities.webhooks is False
    snapshot = await adapter.submit(REQUEST)
    assert (snapshot.provider_job_id, snapshot.state) == ("fake-j1", JobState.QUEUED)
    assert adapter.submitted == [REQUEST]
    await adapter.aclose()
    assert adapter.closed


async def test_busy_times_then_accepts_and_reject_refuses():
    adapter = fake.FakeAdapter(busy_times=2)
    for _ in range(2):
        with pytest.raises(ProviderBusy):
            await adapter.submit(REQUEST)
    await adapter.submit(REQUEST)
    assert len(adapter.submitted) == 1
    adapter.reject = True
    with pytest.raises(UpstreamRejected):
        await adapter.submit(REQUEST)


async def test_set_state_drives_fetch_and_unknown_jobs_are_lost():
    adapter = fake.FakeAdapter()
    adapter.set_state("j1", JobState.COMPLETED, output=["a.png"], logs="done")
    snapshot = await adapter.fetch(REF)
    assert (snapshot.state, snapshot.output, snapshot.logs) == (
        JobState.COMPLETED, ["a.png"], "done"
    )
    adapter.forget("j1")
    assert (await adapter.fetch(REF)).lost
    assert adapter.fetch_calls == ["fake-j1", "fake-j1"]


async def test_cancel_ends_an_active_job_once_and_switched_off_capabilities_raise():
    adapter = fake.FakeAdapter()
    await adapter.submit(REQUEST)
    assert await adapter.cancel(REF) is True
    assert (await adapter.fetch(REF)).state is JobState.CANCELED
    assert await adapter.cancel(REF) is False
    assert adapter.cancel_calls == ["fake-j1", "fake-j1"]
    limited = fake.FakeAdapter(fetch=False, cancel=False)
    with pytest.raises(CapabilityMissing):
        await limited.fetch(REF)
    with pytest.raises(CapabilityMissing):
        await limited.cancel(REF)


async def test_signed_webhook_verifies_parses_and_forgeries_fail():
    adapter = fake.FakeAdapter(secret="k1")
    body = adapter.webhook_body("j1", JobState.FAILED, error="boom")
    await adapter.verify_webhook({"X-Fake-Signature": adapter.sign(body)["x-fake-signature"]}, body)
    snapshot = adapter.parse_webhook(body)
    assert (snapshot.provider_job_id, snapshot.state, snapshot.error) == (
        "fake-j1", JobState.FAILED, "boom"
    )
    forged = fake.FakeAdapter(secret="other").sign(body)
    for headers in ({}, forged, adapter.sign(body + b" ")):
        with pytest.raises(WebhookVerificationError):
            await adapter.verify_webhook(headers, body)
    with pytest.raises(ContractViolation):
        adapter.parse_webhook(b'{"id": "fake-j1", "status": "exploded"}')
