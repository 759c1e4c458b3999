"""A provider webhook that meets a locked database answers 503 (the provider retries) and
stores nothing; the same webhook once the lock is gone is stored and applied, once. On
SQLite the event's transaction goes through the second connection of
gateway/store/engine/fastwrite.py, which must give up at once on a lock and leave the wait (and
the 503) to the engine, as before it existed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import create_app
from gateway.config import Settings
from gateway.store.schema import provider_events
from tests.integration.test_store_busy import _locked, _short_lock_waits
from tests.support.gateway import VERSION, GatewayHarness, settings_dict
from tests.support.outbox import events_loop

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


async def test_a_provider_webhook_that_meets_a_locked_database_is_503_then_applied_once(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: Callable[..., Any],
) -> None:
    async with _short_lock_waits(backend, tmp_path, monkeypatch) as url:
        settings = Settings(**settings_dict(url, str(tmp_path / "assets")))
        app = create_app(settings, run_loops=False)
        gateway = GatewayHarness(app=app, client=await aiohttp_client(app))
        job_id = (await gateway.create({"version": VERSION, "input": {"prompt": "x"}}))["id"]
        await gateway.settle()
        async with _locked(backend, url):
            assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 503
        async with gateway.store.engine.connect() as conn:
            stored = (await conn.execute(sa.select(sa.func.count()).select_from(provider_events)))
            assert stored.scalar() == 0  # refused: nothing stored
        for _ in range(2):  # the provider's retry, and a duplicate of it
            assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
        # the retry was applied as it was stored (gateway/store/applied.py, pgapplied.py)
        assert await events_loop(gateway).run_once() == 0
        assert await events_loop(gateway).run_once() == 0
        assert (await gateway.get(job_id))["status"] == "succeeded"
