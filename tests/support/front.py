"""The official ``replicate`` client, an in-process gateway, one provider's wire fake.

:func:`front` starts the app with its background loops running (real time, as in
production) on the test's backend, routing ``acme/echo`` (``VERSION``) to the provider
``up``, and gives back a :class:`Front`: the harness, the client (its async API, so it
shares the test's event loop with the gateway and the fake) and the store's raw rows
(:meth:`Front.rows`) for tests that look for what must not be kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import replicate
import sqlalchemy as sa
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import Settings
from gateway.store.schema import jobs, outbox, provider_events
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

__all__ = ["TERMINAL", "Front", "front"]

TERMINAL = {"succeeded", "failed", "canceled"}


@dataclass
class Front:
    h: GatewayHarness
    client: replicate.Client
    base_url: str

    async def create(self, **input: Any) -> replicate.prediction.Prediction:
        return await self.client.predictions.async_create(
            version=VERSION, input={"prompt": "hello", **input}
        )

    async def rows(self) -> dict[str, list[Any]]:
        """Every stored ``jobs.error``, ``provider_events.body`` and outbox payload."""
        async with self.h.store.engine.connect() as conn:
            errors = (await conn.execute(sa.select(jobs.c.error))).scalars().all()
            bodies = (await conn.execute(sa.select(provider_events.c.body))).scalars().all()
            payloads = (await conn.execute(sa.select(outbox.c.payload))).scalars().all()
        return {"errors": list(errors), "bodies": list(bodies), "payloads": list(payloads)}

    async def aclose(self) -> None:
        """Close the client's connections (the app closes with its test client)."""
        await self.client._async_client.aclose()

    def stream_url(self, prediction: replicate.prediction.Prediction) -> str:
        """The prediction's stream URL, on this test server (the app's public_url is
        ``https://gateway.test``)."""
        assert prediction.urls is not None
        return prediction.urls["stream"].replace("https://gateway.test", self.base_url)


async def front(
    make_settings: Callable[..., Settings],
    aiohttp_client: Callable[..., Any],
    provider: dict[str, Any],
    target: str | None,
    **gateway: Any,
) -> Front:
    """The app in front of ``provider`` (settings of the ``up`` provider)."""
    route: dict[str, Any] = {"model": "acme/echo", "version": VERSION, "provider": "up"}
    if target:
        route["target"] = target
    settings = make_settings(
        providers={"up": provider}, routes=[route],
        gateway={"max_job_lifetime_s": 60.0, "cancel_grace_s": 5.0, **gateway},
    )
    app = create_app(settings)  # the background loops run
    test_client: TestClient = await aiohttp_client(app)
    base_url = str(test_client.make_url("")).rstrip("/")
    made = replicate.Client(api_token=TOKEN, base_url=base_url)
    made.poll_interval = 0.05
    return Front(GatewayHarness(app=app, client=test_client), made, base_url)
