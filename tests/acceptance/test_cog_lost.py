"""A Cog prediction whose webhooks never arrive, once the watchdog probe finds that the
real Cog server no longer knows it, no longer holds the provider's only slot.

Before, it counted as in flight for the whole of ``lost_grace_s`` (480 s, Cog's terminal
webhook retry window) after the probe, so a ``max_concurrency = 1`` provider that was in
fact idle took no other prediction for eight minutes (docs/cog.md §2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cog_server import CogServer
from tests.support.fixtures import ECHO_MODEL_DIR
from tests.support.gateway import GatewayHarness
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cog]

FETCH_INTERVAL_S = 1.0


@pytest.fixture(scope="module")
def cog() -> Iterator[CogServer]:
    """Its own server: the webhooks it retries for minutes go to no one else's test."""
    with CogServer(ECHO_MODEL_DIR) as server:
        yield server


async def test_a_lost_prediction_frees_the_slot_of_a_one_slot_cog(
    make_gateway: Any, cog: CogServer,
) -> None:
    gateway: GatewayHarness = await make_gateway(
        # Cog's webhooks go to a port nothing listens on: none ever arrives.
        gateway={"callback_url": "http://127.0.0.1:9"},
        providers={"cog": {
            "kind": "cog", "base_url": cog.url, "max_concurrency": 1,
            "fetch_interval_s": FETCH_INTERVAL_S, "fetch_max_interval_s": FETCH_INTERVAL_S,
        }},
        routes=[{"model": "acme/echo", "provider": "cog"}],
    )
    first = await gateway.create({"version": "acme/echo", "input": {"prompt": "one"}})
    await gateway.settle()
    assert (await gateway.store.get(first["id"])).submitted_at is not None
    second = await gateway.create({"version": "acme/echo", "input": {"prompt": "two"}})
    await gateway.settle()
    assert (await gateway.store.get(second["id"])).submitted_at is None  # the slot is taken
    await wait_until(lambda: asyncio.to_thread(lambda: cog.health() == "READY"), 30.0,
                     what="Cog idle: the first prediction ran, its webhooks went nowhere")

    async def second_submitted() -> bool:
        gateway.clock.advance(FETCH_INTERVAL_S)  # the watchdog probe of the first is due
        await gateway.settle()
        return (await gateway.store.get(second["id"])).submitted_at is not None

    await wait_until(second_submitted, 20.0, what="the second prediction submitted")
    lost = await gateway.store.get(first["id"])
    assert lost.lost_at is not None  # found lost by the probe ...
    assert not lost.state.terminal  # ... and still waiting out lost_grace_s for a webhook
