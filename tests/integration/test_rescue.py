"""Rescue on rollback (docs/canary.md, "Rescue on rollback"): a rollback moves the
candidate's predictions it never accepted to the control, once; the others stay."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.app import LOOPS
from gateway.dispatcher import NOT_CONNECTED, Dispatcher
from gateway.http import keys
from gateway.notify import LoopName
from gateway.store.schema import jobs
from gateway.webhooks.signing import generate_secret
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import outbox_rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the rescue's guarded UPDATE is the point
ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_rescue_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DEAD = {"kind": "cog", "base_url": "http://127.0.0.1:1", "max_concurrency": 10,
        "submit_timeout_s": 3600}  # nothing listens there; never given up on meanwhile


async def _admin(gateway: GatewayHarness, method: str, path: str, **kwargs: Any) -> Any:
    response = await gateway.client.request(method, f"/admin{path}", headers=ADMIN, **kwargs)
    assert response.status == 200, await response.text()
    return await response.json()


async def _refused(gateway: GatewayHarness, made: list[str]) -> None:
    """Dispatch rounds until every one of ``made`` has had its connection refused."""
    dispatcher = next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Dispatcher))

    async def refused() -> bool:
        await dispatcher.run_once()
        return [(await gateway.store.get(x)).raw_status for x in made] == (
            [NOT_CONNECTED] * len(made))

    await wait_until(refused, 10.0, what="a refused submit of every create")


async def _set(gateway: GatewayHarness, job_id: str, **values: Any) -> None:
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))


async def test_a_rollback_moves_only_what_the_candidate_never_accepted(make_gateway: Any):
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 10}, "next": DEAD},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "candidate": "next"}],
        admin={"tokens": [{"name": "ops-carol", "token": ADMIN_TOKEN}]},
    )
    await _admin(gateway, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    body = {"version": VERSION, "input": {"prompt": "x"}}
    made = [(await gateway.create(body))["id"] for _ in range(6)]
    await _refused(gateway, made[:5])  # the sixth is made after the rounds: never tried
    never_tried = (await gateway.create(body))["id"]
    refused, in_transit, leased, canceled = made[:2], made[2], made[3], made[4]
    await _set(gateway, in_transit, raw_status="unreachable")  # it may have reached it
    await _set(gateway, leased, leased_until=gateway.clock.now() + timedelta(seconds=30))
    await _set(gateway, canceled, cancel_requested_at=gateway.clock.now())
    accepted = made[5]
    await _set(gateway, accepted, state=JobState.RUNNING.value, provider_job_id="p-1",
               submitted_at=gateway.clock.now())

    entry = await _admin(gateway, "POST", f"/routes/{ROUTE}/rollback",
                         json={"reason": "the candidate is down"})
    moved = [*refused, never_tried]
    assert entry["evidence"]["rescued"] == {"count": 3, "to": "fake", "predictions": moved}
    for job_id in moved:
        job = await gateway.store.get(job_id)
        assert (job.provider, job.arm, job.raw_status) == ("fake", "control", None)
        assert job.logs is not None and job.logs.startswith(
            "Moved to the control: candidate 'next' never accepted this prediction; it runs "
            f"on 'fake' (route '{ROUTE}' rolled back by ops-carol)\n")
    for job_id in (in_transit, leased, canceled, accepted):
        assert (await gateway.store.get(job_id)).provider == "next"

    again = await _admin(gateway, "POST", f"/routes/{ROUTE}/rollback",
                         json={"reason": "once more"})
    assert again["evidence"]["rescued"]["count"] == 0  # each moves once

    await _set(gateway, leased, leased_until=None)  # only the control runs: the rest stays
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.update().where(jobs.c.provider == "next")
                           .values(state=JobState.CANCELED.value))
    await gateway.settle()
    assert sorted(r.job_id for r in gateway.fake.submitted) == sorted(moved)  # once each
    for job_id in moved:
        await gateway.deliver(job_id, JobState.COMPLETED, output="X", logs="done\n")
    await gateway.settle()
    for job_id in moved:
        got = await gateway.get(job_id)
        assert got["status"] == "succeeded"
        assert got["logs"].startswith("Moved to the control: ") and got["logs"].endswith("done\n")
    async with gateway.store.engine.connect() as conn:
        on_candidate = (await conn.execute(
            sa.select(sa.func.count()).where(jobs.c.provider == "next"))).scalar_one()
    assert on_candidate == 4


async def test_a_late_rescue_at_canary_0_is_audited_and_announced(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prediction whose submit was under way at the rollback, moved later by the guard
    loop (at canary 0), is a rollout action like the rollback: it has its audit entry and
    its operator event. It had neither: only a log line said where it went."""
    monkeypatch.setenv("CUTOVER_TEST_RESCUE_SECRET", generate_secret())
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 10}, "next": DEAD},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "candidate": "next"}],
        admin={"tokens": [{"name": "ops-carol", "token": ADMIN_TOKEN}]},
        webhooks={"allow_hosts": ["127.0.0.1"]},
        operator_webhook={"url": "http://127.0.0.1:9/ops",
                          "secret_env": "CUTOVER_TEST_RESCUE_SECRET"},
    )
    await _admin(gateway, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    stranded = (await gateway.create({"version": VERSION, "input": {"prompt": "x"}}))["id"]
    await _refused(gateway, [stranded])
    await _set(gateway, stranded, leased_until=gateway.clock.now() + timedelta(seconds=30))
    entry = await _admin(gateway, "POST", f"/routes/{ROUTE}/rollback",
                         json={"reason": "the candidate is down"})
    assert entry["evidence"]["rescued"]["count"] == 0  # its submit was under way
    await _set(gateway, stranded, leased_until=None)  # ... and found no connection
    guard = next(loop for loop in gateway.app[LOOPS] if loop.name is LoopName.GUARD)
    await guard.run_once()
    assert (await gateway.store.get(stranded)).provider == "fake"  # moved late

    history = await gateway.app[keys.ROUTES].book.history(ROUTE)
    late = history[0]
    assert (late.who, late.action) == ("guard", "rescue")
    assert late.evidence == {"rescued": {"count": 1, "to": "fake", "predictions": [stranded]}}
    assert late.before == late.after and late.after["canary_percent"] == 0
    assert "under way at the rollback" in late.reason
    events = [json.loads(r.payload) for r in await outbox_rows(gateway.store.engine)
              if r.event == "operator"]
    assert [e["type"] for e in events] == [
        "route.canary_changed", "route.rolled_back", "route.rescued"]
    assert events[-1]["data"]["audit_id"] == late.id
    assert events[-1]["data"]["evidence"]["rescued"]["predictions"] == [stranded]
    await guard.run_once()  # nothing more to move: nothing more written
    assert len(await gateway.app[keys.ROUTES].book.history(ROUTE)) == len(history)
