"""Retention: old delivered webhooks and applied provider events are pruned, expired
uploads go, and data_retention removes a finished prediction's data (docs/retention.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.clock import utcnow
from gateway.files.service import FileService
from gateway.http.files import FILES
from gateway.retention import Retention
from gateway.store.retention import RetentionStore
from gateway.store.schema import outbox, provider_events
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


def retention(gateway: GatewayHarness, *, data_s: float | None) -> Retention:
    """A retention loop with a small batch, on the app's clock."""
    from gateway.http import keys

    return Retention(
        store=RetentionStore(gateway.store.engine),
        files=gateway.app[FILES],
        storage=gateway.app[keys.STORAGE],
        notifier=gateway.app[keys.NOTIFIER],
        outbox_age_s=3600,
        events_age_s=3600,
        data_retention_s=data_s,
        batch=2,
        interval_s=60,
        clock=gateway.clock,
    )


async def count(gateway: GatewayHarness, table: sa.Table) -> int:
    async with gateway.store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar())


async def finished_with_file(gateway: GatewayHarness) -> dict[str, Any]:
    created = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await gateway.deliver(created["id"], JobState.COMPLETED,
                          output="data:text/plain;base64,SEk=")
    return await gateway.wait_for(created["id"], "succeeded")


async def test_data_retention_removes_data_and_files(make_gateway: Any) -> None:
    gateway = await make_gateway(retention={"data_retention_s": 3600})
    done = await finished_with_file(gateway)
    assert (await gateway.get(done["id"]))["output"] == done["output"]  # served twice
    asset = done["output"].removeprefix("https://gateway.test")
    assert (await gateway.client.get(asset)).status == 200
    gateway.clock.advance(timedelta(hours=2))
    loop = retention(gateway, data_s=3600)
    assert await loop.run_once() >= 1
    after = await gateway.get(done["id"])
    assert after["data_removed"] is True
    assert after["input"] is None and after["output"] is None and after["logs"] == ""
    assert (await gateway.client.get(asset)).status == 404
    assert await loop.run_once() == 0 or (await gateway.get(done["id"]))["data_removed"]


async def test_without_data_retention_data_stays(gateway: GatewayHarness) -> None:
    done = await finished_with_file(gateway)
    gateway.clock.advance(timedelta(days=30))
    await retention(gateway, data_s=None).run_once()
    assert (await gateway.get(done["id"]))["output"] == done["output"]


async def test_old_events_and_delivered_webhooks_are_pruned_in_bounded_rounds(
    gateway: GatewayHarness,
) -> None:
    for _ in range(3):
        await finished_with_file(gateway)
    now = utcnow()
    job_id = (await gateway.store.page(limit=1))[0].id
    async with gateway.store.engine.begin() as conn:  # as if delivered long ago
        await conn.execute(outbox.insert(), [
            {"msg_id": f"msg_old_{i}", "job_id": job_id,
             "event": "completed", "url": "https://x.test", "payload": "{}",
             "status": "delivered", "attempts": 1, "created_at": now - timedelta(days=9),
             "delivered_at": now - timedelta(days=9)} for i in range(3)
        ])
    events_before = await count(gateway, provider_events)
    assert events_before >= 3
    gateway.clock.advance(timedelta(hours=2))
    loop = retention(gateway, data_s=None)
    assert await loop.run_once() == 4  # two of each: rounds are bounded by `batch`
    assert await count(gateway, outbox) == 1
    await loop.run_once()
    assert await count(gateway, outbox) == 0
    assert await count(gateway, provider_events) == max(0, events_before - 4)


async def test_expired_uploads_are_deleted(make_gateway: Any) -> None:
    gateway = await make_gateway(files={"ttl_s": 1})
    form = aiohttp.FormData()
    form.add_field("content", b"bytes", filename="a.bin")
    made = await (await gateway.client.post("/v1/files", data=form, headers=gateway.headers)).json()
    files: FileService = gateway.app[FILES]
    gateway.clock.advance(5)
    assert await files.prune() == 1
    assert await files.prune() == 0
    assert made["id"]


async def test_pruning_reads_through_indexes(gateway: GatewayHarness) -> None:
    if gateway.store.engine.dialect.name != "sqlite":
        return
    now = utcnow()
    store = RetentionStore(gateway.store.engine)
    statements = [
        sa.select(outbox.c.id).where(outbox.c.delivered_at.is_not(None),
                                     outbox.c.delivered_at < now)
        .order_by(outbox.c.delivered_at).limit(5),
        sa.select(provider_events.c.id).where(provider_events.c.processed_at.is_not(None),
                                              provider_events.c.processed_at < now)
        .order_by(provider_events.c.processed_at, provider_events.c.id).limit(5),
    ]
    async with gateway.store.engine.connect() as conn:
        for statement in statements:
            compiled = statement.compile(conn.sync_engine if False else gateway.store.engine,
                                         compile_kwargs={"literal_binds": True})
            plan = (await conn.execute(sa.text(f"EXPLAIN QUERY PLAN {compiled}"))).all()
            text = " ".join(str(row) for row in plan)
            assert "USING INDEX" in text or "USING COVERING INDEX" in text, text
    assert store is not None
