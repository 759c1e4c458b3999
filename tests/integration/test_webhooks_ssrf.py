"""The SSRF guard on webhook targets: at create (422) and at delivery (dead-lettered).

Names resolve through a stub resolver; every address a test may connect to is in
127.0.0.0/8 (the "public" address the stub hands out at create time is never dialled).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from contracts.job import JobState
from gateway.app import WEBHOOK_POLICY, create_app
from gateway.store.schema import outbox
from gateway.webhooks import ssrf
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import observe, outbox_rows, start_job
from tests.support.receiver import Receiver

PUBLIC_ADDRESS = "93.184.215.14"  # a global address the stub hands out; never dialled


class StubResolver:
    """Answers from a table; a list of answers is consumed one per call (DNS rebinding)."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answers = self.table.get(host)
        if not answers:
            raise OSError(f"stub: no such host {host!r}")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
async def make_guarded(
    make_settings: Callable[..., Any], aiohttp_client: Callable[..., Any]
) -> Callable[..., Any]:
    """A gateway whose SSRF guard resolves names with a :class:`StubResolver`."""

    async def make(resolver: StubResolver, **sections: Any) -> GatewayHarness:
        settings = make_settings(**sections)
        app = create_app(settings, run_loops=False)
        app[WEBHOOK_POLICY] = ssrf.WebhookTargetPolicy(
            settings.webhooks.allow_hosts, resolver=resolver
        )
        client: TestClient = await aiohttp_client(app)
        return GatewayHarness(app=app, client=client)

    return make


@pytest.fixture
async def loopback_2() -> AsyncIterator[Receiver]:
    """A receiver on 127.0.0.2, which is loopback and not allow-listed."""
    async with Receiver(host="127.0.0.2") as rec:
        yield rec


async def test_refused_targets_at_create_are_422(
    make_guarded: Callable[..., Any], loopback_2: Receiver
) -> None:
    resolver = StubResolver({
        "metadata.test": [["169.254.169.254"]],
        "private.test": [["10.1.2.3"]],
        "mixed.test": [[PUBLIC_ADDRESS, "127.0.0.1"]],  # one bad address is enough
        "localhost": [["127.0.0.1", "::1"]],
    })  # fmt: skip
    gateway = await make_guarded(resolver)
    port = loopback_2.port
    refused = [
        f"http://127.0.0.2:{port}/hook",  # plain http to a host that is not allow-listed
        f"https://127.0.0.2:{port}/hook",  # loopback, not allow-listed
        f"https://localhost:{port}/hook",  # a name is never vouched for by 127.0.0.1
        "https://metadata.test/latest/meta-data/",  # resolves to cloud metadata
        "https://private.test/hook",
        "https://mixed.test/hook",
        "https://[::ffff:127.0.0.2]/hook",
    ]
    for url in refused:
        response = await gateway.client.post(
            "/v1/predictions",
            json={"version": VERSION, "input": {"prompt": "x"}, "webhook": url},
            headers=gateway.headers,
        )
        assert response.status == 422, url
        assert "webhook" in (await response.json())["detail"]
    assert {"metadata.test", "private.test", "mixed.test", "localhost"} <= set(resolver.calls)
    assert loopback_2.received == []


async def test_a_target_that_rebinds_to_loopback_is_refused_at_delivery(
    make_guarded: Callable[..., Any], loopback_2: Receiver
) -> None:
    # Public when the prediction is created, 127.0.0.2 when the webhook is sent.
    resolver = StubResolver({"hooks.test": [[PUBLIC_ADDRESS], ["127.0.0.2"]]})
    gateway = await make_guarded(resolver, webhooks={"throttle_s": 0})
    url = f"https://hooks.test:{loopback_2.port}/hook"
    job_id = await start_job(gateway, url, ["start", "completed"])
    await observe(gateway, job_id, JobState.RUNNING)
    await gateway.settle()
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    rows = await outbox_rows(gateway.store.engine, job_id)
    assert [(r.event, r.status, r.attempts) for r in rows] == [
        ("start", "dead", 1), ("completed", "dead", 1),
    ]  # fmt: skip
    for row in rows:  # dead at once, with the reason, never retried
        assert row.last_error.startswith("refused by the SSRF guard: ")
        assert "127.0.0.2 (loopback)" in row.last_error and row.last_status_code is None
    assert loopback_2.received == []


async def test_a_stored_target_no_longer_allow_listed_is_refused_at_delivery(
    make_guarded: Callable[..., Any], loopback_2: Receiver
) -> None:
    # The prediction was accepted while 127.0.0.2 was allow-listed; the operator has since
    # removed it, and the rows still waiting must not be sent.
    gateway = await make_guarded(StubResolver({}))
    async with Receiver() as allowed:
        job_id = await start_job(gateway, allowed.url(), ["completed"])
        await observe(gateway, job_id, JobState.COMPLETED, output="x")
        async with gateway.store.engine.begin() as conn:
            await conn.execute(outbox.update().values(url=loopback_2.url()))
        await gateway.settle()
        assert allowed.received == []
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts) == ("dead", 1)
    assert "plain http to webhook host '127.0.0.2'" in row.last_error
    assert loopback_2.received == []
