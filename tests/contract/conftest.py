"""The contract suite's fixtures: one gateway per test, in front of one provider kind.

``driver`` runs every test once per kind (``fake``, ``cog``, ``fal``, ``runpod``,
``openai``, ``replicate``), each against its fake server; ``up`` is the in-process
gateway routing ``acme/echo`` to that provider (named ``up``). The suite runs on SQLite:
the store's behaviour on PostgreSQL is the integration suite's subject.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.contract.drivers import KINDS, Driver, make_driver
from tests.support.gateway import VERSION, GatewayHarness


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture(params=KINDS)
async def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                 ) -> AsyncIterator[Driver]:
    made = make_driver(request.param)
    if made.token_env and made.token:
        monkeypatch.setenv(made.token_env, made.token)
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


@pytest.fixture
async def up(driver: Driver, make_gateway: Callable[..., Any]) -> GatewayHarness:
    route: dict[str, Any] = {"model": "acme/echo", "version": VERSION, "provider": "up"}
    if driver.target:
        route["target"] = driver.target
    harness: GatewayHarness = await make_gateway(
        providers={"up": driver.provider()}, routes=[route],
        gateway={"max_job_lifetime_s": 30.0, "cancel_grace_s": 2.0},
    )
    driver.h = harness
    return harness
