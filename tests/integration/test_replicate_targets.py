"""Replicate as an upstream: a route's ``target`` picks the create endpoint (by version,
by model, by deployment; default: the route's own model and version), and its webhooks
verify with the secret fetched from the upstream (docs/providers.md, "replicate")."""

from __future__ import annotations

import pytest

from adapters.replicate import ReplicateAdapter
from contracts.errors import WebhookVerificationError
from contracts.snapshot import SubmitRequest
from tests.support.upstreams.replicate import REPLICATE_TOKEN, FakeReplicate

VERSION = "a" * 64


@pytest.mark.parametrize(
    ("target", "model", "version", "created_by"),
    [
        (f"acme/echo:{VERSION}", "x/y", "hidden", f"version:{VERSION}"),
        ("acme/echo", "x/y", "hidden", "model:acme/echo"),
        ("deployments/acme/echo-prod", "x/y", "hidden", "deployment:acme/echo-prod"),
        (None, "acme/echo", VERSION, f"version:{VERSION}"),
        (None, "acme/echo", "hidden", "model:acme/echo"),
    ],
)
async def test_target_picks_the_endpoint(target, model, version, created_by):
    async with FakeReplicate(token=REPLICATE_TOKEN) as server:
        adapter = ReplicateAdapter(name="r8", token=REPLICATE_TOKEN, base_url=server.url)
        try:
            snapshot = await adapter.submit(SubmitRequest(
                job_id="j1", input={"prompt": "hi"}, model=model, version=version,
                target=target, webhook_url="https://gw.test/provider-webhooks/r8/j1/t",
            ))
            assert server.created_by == [created_by]
            assert snapshot.provider_job_id in server.jobs
        finally:
            await adapter.aclose()


async def test_webhooks_verify_with_the_fetched_secret_and_forgeries_fail():
    async with FakeReplicate(token=REPLICATE_TOKEN) as server:
        adapter = ReplicateAdapter(name="r8", token=REPLICATE_TOKEN, base_url=server.url + "/v1")
        try:
            headers, body = server.sign(b'{"id": "p1", "status": "succeeded", "output": "HI"}')
            await adapter.verify_webhook(headers, body)
            assert adapter.parse_webhook(body).output == "HI"
            with pytest.raises(WebhookVerificationError):
                await adapter.verify_webhook(headers, body.replace(b"HI", b"HO"))
        finally:
            await adapter.aclose()
