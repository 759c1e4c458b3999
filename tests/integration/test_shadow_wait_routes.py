"""Each route's shadows are dropped when their own ``shadow_budget.max_wait_s`` runs out,
however many shadows of a route with a longer wait were created before them
(gateway/rollout/shadowgate.py, ``ShadowGate.waited_too_long``; docs/canary.md), on every backend.

The reaper asked the store for the oldest waiting shadows of every route, a batch at a
time, then skipped those whose own route's wait had not run out: a batch of a long-waiting
route's shadows hid a short-waiting route's shadow from every round, while the reaper,
told by ``ShadowGate.next_drop_at`` that the short one was due, went round every
``loop_interval_s`` without dropping it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.app import LOOPS
from gateway.reaper import Reaper
from gateway.rollout.shadowgate import WAITED
from gateway.store.schema import jobs
from tests.integration.test_shadow_runs import _sections
from tests.support.gateway import VERSION

SHORT_S, LONG_S = 10.0, 3600.0


async def _shadow_of(gateway: Any, primary_id: str) -> Any:
    query = sa.select(jobs).where(jobs.c.shadow_of == primary_id)
    async with gateway.store.engine.connect() as conn:
        return (await conn.execute(query)).one()


async def test_a_short_waits_shadow_is_dropped_behind_a_batch_of_long_waits(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = _sections(shadow_budget={"max_concurrent": 50, "max_per_hour": 1000,
                                        "max_wait_s": SHORT_S})
    short = sections["routes"][0]
    sections["routes"].append({**short, "model": "acme/plain", "version": None,
                               "shadow_budget": {**short["shadow_budget"], "max_wait_s": LONG_S}})
    del sections["routes"][1]["version"]
    sections["providers"]["fake2"]["max_concurrency"] = 1  # the candidate stays full
    gateway = await make_gateway(**sections)
    reaper = next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Reaper))
    monkeypatch.setattr(reaper, "_batch", 2)  # a round's batch (64) stands for a full one

    plain = []
    for _ in range(3):  # the first shadow takes the slot, two wait for LONG_S
        response = await gateway.client.post(
            "/v1/models/acme/plain/predictions", headers=gateway.headers,
            json={"input": {"prompt": "x", "n": 1}},
        )
        assert response.status == 201, await response.text()
        plain.append((await response.json())["id"])
        await gateway.settle()
    echo = await gateway.create({"version": VERSION, "input": {"prompt": "x", "n": 1}})
    await gateway.settle()
    waiting = await _shadow_of(gateway, echo["id"])
    long_waiting = await _shadow_of(gateway, plain[1])
    assert waiting.state == long_waiting.state == "creating"
    assert waiting.route != long_waiting.route

    gateway.clock.advance(timedelta(seconds=SHORT_S + 1))
    assert reaper.next_due is not None
    assert await reaper.next_due(gateway.clock.now()) <= gateway.clock.now()  # due: look
    await reaper.run_once()
    dropped = await _shadow_of(gateway, echo["id"])
    assert (dropped.state, dropped.error) == ("canceled", WAITED)
    for primary in plain[1:]:  # theirs has not run out
        assert (await _shadow_of(gateway, primary)).state == "creating"
