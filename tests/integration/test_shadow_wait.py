"""A shadow that its provider (at capacity) keeps waiting is dropped after ``max_wait_s``.

Shadows wait behind every app prediction at a full provider (docs/limits.md, "Fair
queueing"); one at a provider that stays full used to wait until ``max_job_lifetime_s``
(30 min) and end ``failed``. The route's ``shadow_budget.max_wait_s`` (default 300 s) now
bounds the wait: the reaper drops it (``canceled``, counted as dropped), it makes no pair,
and the guard, judging contract breaks, does not roll the canary back over it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.http import keys
from gateway.rollout.guardloop import Guard
from gateway.rollout.shadowgate import WAITED
from gateway.store.schema import jobs
from tests.integration.test_shadow_runs import ADMIN, ROUTE, _control_percent, _sections
from tests.support.gateway import VERSION

MAX_WAIT_S = 60.0


async def _shadows(gateway: Any) -> list[Any]:
    query = sa.select(jobs).where(jobs.c.arm == "shadow").order_by(jobs.c.created_at, jobs.c.id)
    async with gateway.store.engine.connect() as conn:
        return list(await conn.execute(query))


async def test_a_shadow_waiting_past_max_wait_is_dropped_and_the_guard_ignores_it(
    make_gateway: Any,
) -> None:
    sections = _sections(
        caller_key="header:X-Caller", guard={"max_contract_break_rate": 0.05, "min_samples": 1},
        shadow_budget={"max_concurrent": 50, "max_per_hour": 1000, "max_wait_s": MAX_WAIT_S},
    )
    sections["providers"]["fake2"]["max_concurrency"] = 1  # the candidate stays full
    gateway = await make_gateway(**sections)
    response = await gateway.client.post(f"/admin/routes/{ROUTE}/canary", headers=ADMIN,
                                         json={"percent": _control_percent(), "reason": "r"})
    assert response.status == 200
    made = [await gateway.create({"version": VERSION, "input": {"prompt": "x", "n": 1}},
                                 **{"X-Caller": "steady"}) for _ in range(2)]
    await gateway.settle()
    first, second = await _shadows(gateway)
    assert first.submitted_at is not None and second.state == "creating"  # one slot
    for prediction in made:
        assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output="X") == 200
    await gateway.settle()
    gateway.clock.advance(timedelta(seconds=MAX_WAIT_S / 2))
    await gateway.settle()
    assert (await _shadows(gateway))[1].state == "creating"  # not yet
    gateway.clock.advance(timedelta(seconds=MAX_WAIT_S / 2 + 1))
    await gateway.settle()
    dropped = (await _shadows(gateway))[1]
    assert (dropped.state, dropped.error) == ("canceled", WAITED)
    fake2 = gateway.app[keys.PROVIDERS]["fake2"].adapter
    assert second.id not in [r.job_id for r in fake2.submitted]
    metrics = await (await gateway.client.get("/metrics")).text()
    assert f'cutover_shadows_total{{outcome="dropped",route="{ROUTE}"}} 1.0' in metrics
    guard = next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Guard))
    assert await guard.run_once() == 0
    shown = await (await gateway.client.get(f"/admin/routes/{ROUTE}", headers=ADMIN)).json()
    assert shown["spec"]["canary_percent"] == _control_percent()  # no rollback
    report = await (await gateway.client.get(f"/admin/routes/{ROUTE}/shadow-report",
                                             headers=ADMIN, params={"format": "json"})).json()
    assert (report["pairs"], report["contract_breaks"]["count"]) == (0, 0)
