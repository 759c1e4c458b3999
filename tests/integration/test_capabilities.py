"""The gateway plans by each adapter's capabilities (docs/providers.md, "Polling"):
a provider that cannot be polled is never polled, one that cannot cancel is never asked
to, and one without webhooks gets no webhook URL."""

from __future__ import annotations

from contracts.job import JobState
from contracts.snapshot import Capabilities
from tests.support.gateway import VERSION, GatewayHarness


async def test_a_provider_that_cannot_be_polled_is_not_polled(gateway: GatewayHarness):
    gateway.fake.capabilities = Capabilities(webhooks=True, fetch=False, cancel=True,
                                             fetch_interval_s=0.01)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    assert gateway.fake.submitted and gateway.fake.fetch_calls == []
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output="HI") == 200
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"] == "HI" and gateway.fake.fetch_calls == []


async def test_a_provider_that_cannot_cancel_is_not_asked(gateway: GatewayHarness):
    gateway.fake.capabilities = Capabilities(webhooks=True, fetch=True, cancel=False)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    response = await gateway.client.post(
        f"/v1/predictions/{prediction['id']}/cancel", headers=gateway.headers
    )
    assert response.status == 200
    await gateway.settle()
    assert gateway.fake.cancel_calls == []


async def test_a_provider_without_webhooks_gets_no_webhook_url(gateway: GatewayHarness):
    gateway.fake.capabilities = Capabilities(webhooks=False, fetch=True, cancel=True)
    await gateway.create({"version": VERSION, "input": {"prompt": "hi"}})
    await gateway.settle()
    assert [r.webhook_url for r in gateway.fake.submitted] == [None]
