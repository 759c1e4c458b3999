"""Outbound webhooks end to end: the real ``replicate`` client -> the gateway (HTTPS
subprocess) -> the real Cog server; a receiver on 127.0.0.1 gets the gateway's webhooks
and checks them with the client's own ``Webhooks.validate``.

The client's synchronous API runs in a worker thread (as an app would call it), so the
receiver keeps answering on the test's event loop meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import replicate
import sqlalchemy as sa
from replicate.prediction import Prediction

from gateway.store.engine import db
from gateway.store.schema import outbox
from tests.support.cog_server import CogServer
from tests.support.databases import DEFAULT_BACKENDS
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, LiveGateway, running_gateway
from tests.support.receiver import Receiver, validate_with_replicate
from tests.support.tls import ServerTLS


@pytest.fixture(scope="module", params=DEFAULT_BACKENDS)
def live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS,
    https_cog: CogServer,
) -> Iterator[LiveGateway]:
    workdir = tmp_path_factory.mktemp(f"live-webhooks-{request.param}")
    with running_gateway(request.param, workdir, tls, https_cog.url) as gateway:
        yield gateway


@pytest.fixture
def client(live: LiveGateway) -> Iterator[replicate.Client]:
    transport = httpx.HTTPTransport()  # ours, so that its connections are closed at the end
    yield replicate.Client(api_token=LIVE_TOKEN, base_url=live.url, transport=transport)
    transport.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


async def create(client: replicate.Client, **fields: Any) -> Prediction:
    """``predictions.create(version=..., **fields)`` then ``wait()``, in a thread."""

    def run() -> Prediction:
        prediction = client.predictions.create(version=ECHO_VERSION, **fields)
        prediction.wait()
        return prediction

    return await asyncio.to_thread(run)


async def secret_of(client: replicate.Client) -> str:
    return str((await asyncio.to_thread(client.webhooks.default.secret)).key)


async def settled(live: LiveGateway, prediction_id: str, timeout_s: float = 20.0) -> list[str]:
    """Wait until no event of the prediction is pending; return their statuses."""
    engine = db.create_engine(live.database_url)
    query = sa.select(outbox.c.status).where(outbox.c.job_id == prediction_id)

    async def poll() -> list[str]:
        while True:
            async with engine.connect() as conn:
                statuses = list((await conn.execute(query)).scalars())
            if statuses and "pending" not in statuses:
                return statuses
            await asyncio.sleep(0.1)

    try:
        return await asyncio.wait_for(poll(), timeout_s)
    finally:
        await engine.dispose()


async def test_one_signed_completed_webhook(
    client: replicate.Client, live: LiveGateway, receiver: Receiver
) -> None:
    url = receiver.url("/hooks/replicate?customId=7")
    p = await create(
        client, input={"prompt": "hook"}, webhook=url, webhook_events_filter=["completed"]
    )
    assert await settled(live, p.id) == ["delivered"]
    (got,) = receiver.received
    secret = await secret_of(client)
    validate_with_replicate(got, secret)
    assert got.query == "customId=7"
    assert (got.payload["id"], got.payload["status"], got.payload["output"]) == (
        p.id, "succeeded", "HOOK",
    )  # fmt: skip


async def test_start_and_completed_events_in_order(
    client: replicate.Client, live: LiveGateway, receiver: Receiver
) -> None:
    p = await create(
        client,
        input={"prompt": "two events", "steps": 2, "delay": 0.3},
        webhook=receiver.url(),
        webhook_events_filter=["start", "completed"],
    )
    assert await settled(live, p.id) == ["delivered", "delivered"]
    statuses = [got.payload["status"] for got in receiver.received]
    assert statuses == ["processing", "succeeded"]
    secret = await secret_of(client)
    for got in receiver.received:
        validate_with_replicate(got, secret)


async def test_a_failed_prediction_sends_a_failed_payload(
    client: replicate.Client, live: LiveGateway, receiver: Receiver
) -> None:
    p = await create(
        client,
        input={"prompt": "bad", "fail": True},
        webhook=receiver.url(),
        webhook_events_filter=["completed"],
    )
    assert await settled(live, p.id) == ["delivered"]
    (got,) = receiver.received
    assert got.payload["status"] == "failed" and "asked to fail" in got.payload["error"]
    validate_with_replicate(got, await secret_of(client))
