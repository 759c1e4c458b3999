"""Provider events and completed webhooks handed over in memory survive a SIGKILL (the
hand-offs of gateway/store/events.py and gateway/store/handoff.py: the row is committed,
leased to the process, before the provider's webhook is answered).

A real ``cutover serve`` process gets the terminal provider webhook of every prediction
at once and is killed as soon as the last one is answered, when most of them are still
in its memory (unapplied events, unsent completed rows). A new process on the same
database applies each event once the dead one's lease runs out, and each prediction's
completed webhook goes out under one webhook-id.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from gateway.store.engine import db
from gateway.store.schema import jobs, outbox, provider_events
from tests.acceptance.test_restart import complete, config_for
from tests.support.gateway import TOKEN, VERSION
from tests.support.process import GatewayProcess
from tests.support.receiver import Receiver
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

PREDICTIONS = 16


async def test_a_sigkill_right_after_the_providers_webhooks_loses_and_repeats_nothing(
    database_url: str, tmp_path: Path
) -> None:
    config = config_for(database_url, tmp_path)
    engine = db.create_engine(database_url)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with Receiver() as receiver, httpx.AsyncClient(timeout=30, headers=auth) as http:
        process = GatewayProcess(config, tmp_path / "first")
        await asyncio.to_thread(process.start)
        try:
            job_ids = []
            for n in range(PREDICTIONS):
                body = {
                    "version": VERSION,
                    "input": {"prompt": f"p{n}"},
                    "webhook": receiver.url(f"/hook/{n}"),
                    "webhook_events_filter": ["completed"],
                }
                created = await http.post(f"{process.url}/v1/predictions", json=body)
                assert created.status_code == 201, created.text
                job_ids.append(created.json()["id"])
            async with engine.connect() as conn:
                query = sa.select(jobs.c.id, jobs.c.callback_token)
                tokens = dict((await conn.execute(query)).all())
            await asyncio.gather(*(complete(http, process, j, tokens[j]) for j in job_ids))
        finally:
            await asyncio.to_thread(process.kill)  # SIGKILL, at once
        restarted = GatewayProcess(config, tmp_path / "second")
        await asyncio.to_thread(restarted.start)
        try:

            async def settled() -> bool:
                async with engine.connect() as conn:
                    events = (await conn.execute(sa.select(provider_events.c.processed_at)))
                    unapplied = [at for (at,) in events if at is None]
                    rows = (await conn.execute(sa.select(outbox.c.status))).scalars().all()
                return not unapplied and rows == ["delivered"] * PREDICTIONS

            await wait_until(settled, 60, what="every event applied, every webhook sent",
                             interval_s=0.05)
            for job_id in job_ids:
                got = await http.get(f"{restarted.url}/v1/predictions/{job_id}")
                assert got.json()["status"] == "succeeded"
        finally:
            await asyncio.to_thread(restarted.stop)
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(outbox.c.job_id, outbox.c.msg_id))).all()
        await engine.dispose()
    assert sorted(job_id for job_id, _ in rows) == sorted(job_ids)  # one completed row each
    seen: dict[str, str] = {}  # webhook-id -> prediction id, as a deduplicating app keeps
    for got in receiver.accepted:
        seen.setdefault(got.webhook_id, got.payload["id"])
    assert seen == {msg_id: job_id for job_id, msg_id in rows}
