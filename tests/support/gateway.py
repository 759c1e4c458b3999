"""An in-process gateway for integration tests: the real app, a fake provider.

:class:`GatewayHarness` wraps the aiohttp test client and the app. Background loops are
not started; :meth:`settle` runs every loop's ``run_once`` until none has work left, so a
test decides exactly when the gateway moves (docs/architecture.md, rule 15).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from adapters.fake import FakeAdapter
from contracts.job import JobState
from gateway.app import LOOPS
from gateway.http import keys
from gateway.store.jobs import JobStore
from tests.support.clock import MovableClock
from tests.support.waiting import wait_until

__all__ = ["TOKEN", "VERSION", "GatewayHarness", "settings_dict"]

TOKEN = "r8_test_token"  # a test value, not a credential
VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"


def settings_dict(database_url: str, storage_dir: str, **sections: Any) -> dict[str, Any]:
    """A configuration for tests: one fake provider serving ``acme/echo``."""
    data: dict[str, Any] = {
        "gateway": {
            "listen": "127.0.0.1:0",
            "public_url": "https://gateway.test",
            "database_url": database_url,
            "storage_url": f"file://{storage_dir}",
            "api_tokens": [TOKEN],
            "loop_interval_s": 0.05,
            "lease_s": 5.0,
            "dispatch_backoff_base_s": 0.01,
            "dispatch_backoff_max_s": 0.05,
        },
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": {"fake": {"kind": "fake"}},
        "routes": [
            {"model": "acme/echo", "version": VERSION, "provider": "fake"},
            {"model": "acme/plain", "provider": "fake"},
        ],
    }
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(data.get(name), dict):
            data[name] = {**data[name], **values}
        else:
            data[name] = values
    return data


@dataclass
class GatewayHarness:
    """The app under test, its client and its fake provider."""

    app: web.Application
    client: TestClient
    headers: dict[str, str] = field(default_factory=lambda: {"Authorization": f"Bearer {TOKEN}"})

    @property
    def fake(self) -> FakeAdapter:
        adapter = self.app[keys.PROVIDERS]["fake"].adapter
        assert isinstance(adapter, FakeAdapter)
        return adapter

    @property
    def clock(self) -> MovableClock:
        """The app's clock (``create_app(..., clock=MovableClock())``): move it with
        ``advance`` instead of rewriting timestamps in rows."""
        clock = self.app[keys.CLOCK]
        assert isinstance(clock, MovableClock), "create the app with clock=MovableClock()"
        return clock

    @property
    def store(self) -> JobStore:
        return self.app[keys.STORE]

    async def settle(self, rounds: int = 50) -> None:
        """Run every background loop's round until a full pass does nothing."""
        for _ in range(rounds):
            if sum([await loop.run_once() for loop in self.app[LOOPS]]) == 0:
                return
        raise AssertionError(f"the gateway still had work after {rounds} rounds")

    async def create(self, body: dict[str, Any], **headers: str) -> dict[str, Any]:
        response = await self.client.post(
            "/v1/predictions", json=body, headers={**self.headers, **headers}
        )
        assert response.status == 201, await response.text()
        return await response.json()

    async def get(self, prediction_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/v1/predictions/{prediction_id}", headers=self.headers)
        assert response.status == 200, await response.text()
        return await response.json()

    async def deliver(self, job_id: str, state: JobState, **fields: Any) -> int:
        """Send the fake provider's signed webhook for ``job_id``; return the HTTP status."""
        provider, token = await self.store.callback_token(job_id)  # type: ignore[misc]
        body = self.fake.webhook_body(job_id, state, **fields)
        response = await self.client.post(
            f"/provider-webhooks/{provider}/{job_id}/{token}",
            data=body,
            headers=self.fake.sign(body),
        )
        return response.status

    async def wait_for(self, job_id: str, status: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Settle until the prediction reports ``status`` (with a deadline)."""

        async def reached() -> dict[str, Any] | None:
            await self.settle()
            prediction = await self.get(job_id)
            return prediction if prediction["status"] == status else None

        found: dict[str, Any] = await wait_until(
            reached, timeout_s, what=f"prediction {job_id} {status}"
        )
        return found
