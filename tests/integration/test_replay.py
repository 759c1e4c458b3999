"""Replays of recorded inputs (docs/cutover-day.md, "Replaying recorded inputs"): the
admin API starts one, the gateway's replay loop hands the inputs out within the shadow
budget, it stops and resumes without sending an input twice, its report is its own, and
bad input changes nothing. The store's part (leases, the unique index, guarded moves)
runs on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import Job, JobState
from gateway.http import keys
from gateway.rollout.shadowgate import REPLAY_RETRY_S
from gateway.store.replays import ReplayStore
from gateway.store.schema import jobs, outbox, shadow_replays
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.replay import record_rows as record

ROUTE = f"acme/echo:{VERSION}"
REPLAYS = f"/admin/routes/{ROUTE}/replays"
ADMIN = {"Authorization": "Bearer adm_replay_test"}  # a test value, not a credential
VIEWER = {"Authorization": "Bearer view_replay_test"}
BUDGET = 3


def _sections(**route: Any) -> dict[str, Any]:
    return {
        "providers": {"fake": {"kind": "fake", "max_concurrency": 50},
                      "fake2": {"kind": "fake", "max_concurrency": 50}},
        "routes": [
            {"model": "acme/echo", "version": VERSION, "provider": "fake",
             "candidate": "fake2", "baseline_percent": 25,
             "shadow_policy": {"allow_fields": ["prompt"], "max_input_bytes": 200},
             "shadow_budget": {"max_concurrent": BUDGET, "max_per_hour": 1000},
             **route},
            {"model": "acme/plain", "provider": "fake",
             "shadow_policy": {"allow_fields": ["prompt"]}},
            {"model": "acme/nopolicy", "provider": "fake", "candidate": "fake2"},
        ],
        "admin": {"tokens": [{"name": "ops", "token": "adm_replay_test"},
                             {"name": "bob", "token": "view_replay_test", "role": "viewer"}]},
    }


@pytest.fixture
async def gw(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(**_sections())


async def replay_jobs(gateway: GatewayHarness, replay_id: str) -> list[Any]:
    async with gateway.store.engine.connect() as conn:
        return list(await conn.execute(sa.select(jobs).where(jobs.c.replay_id == replay_id)))


async def answer(gateway: GatewayHarness, replay_id: str, output: Any = None) -> int:
    """Complete every submitted, unfinished job of the replay as its recorded twin did
    (the same output: no difference), through the fake's signed webhooks."""
    done = 0
    recorded = {}
    async with gateway.store.engine.connect() as conn:
        for row in await conn.execute(sa.select(jobs.c.id, jobs.c.output)):
            recorded[row.id] = row.output
    for row in await replay_jobs(gateway, replay_id):
        if row.submitted_at is not None and row.state not in ("completed", "failed", "canceled"):
            adapter = gateway.app[keys.PROVIDERS][row.provider].adapter
            body = adapter.webhook_body(row.id, JobState.COMPLETED,  # type: ignore[attr-defined]
                                        output=output or recorded[row.shadow_of])
            provider, token = await gateway.store.callback_token(row.id)  # type: ignore[misc]
            response = await gateway.client.post(
                f"/provider-webhooks/{provider}/{row.id}/{token}", data=body,
                headers=adapter.sign(body))  # type: ignore[attr-defined]
            assert response.status == 200
            done += 1
    await gateway.settle()
    return done


async def start(gateway: GatewayHarness, **body: Any) -> dict[str, Any]:
    response = await gateway.client.post(REPLAYS, json=body, headers=ADMIN)
    assert response.status == 201, await response.text()
    return dict(await response.json())


async def progress(gateway: GatewayHarness, replay_id: str) -> dict[str, Any]:
    response = await gateway.client.get(f"{REPLAYS}/{replay_id}", headers=VIEWER)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def outstanding(gateway: GatewayHarness, replay_id: str) -> int:
    return sum(r.state not in ("completed", "failed", "canceled")
               for r in await replay_jobs(gateway, replay_id))


@pytest.mark.every_backend
async def test_a_replay_runs_within_the_budget_stops_and_resumes_without_resending(gw):
    recorded = await record(gw, ROUTE, 12, imported=4, refused=1)
    replay = await start(gw, limit=10)
    assert (replay["state"], replay["inputs"]["total"]) == ("running", 10)
    await gw.settle()
    assert await outstanding(gw, replay["id"]) <= BUDGET  # never more than the free budget
    rounds = 0
    while (await progress(gw, replay["id"]))["inputs"]["left"] > 5:
        assert await answer(gw, replay["id"]) > 0
        assert await outstanding(gw, replay["id"]) <= BUDGET
        rounds += 1
    stopped = (await (await gw.client.post(f"{REPLAYS}/{replay['id']}/stop",
                                           headers=ADMIN)).json())
    assert stopped["state"] == "stopped"
    handed = stopped["inputs"]["total"] - stopped["inputs"]["left"]
    await answer(gw, replay["id"])  # what it made runs to its end; nothing new is made
    before = await replay_jobs(gw, replay["id"])
    await gw.settle()
    assert len(await replay_jobs(gw, replay["id"])) == len(before)
    assert all(r.state == "completed" for r in before)
    resumed = await gw.client.post(f"{REPLAYS}/{replay['id']}/resume", headers=ADMIN)
    assert resumed.status == 200 and (await resumed.json())["state"] == "running"
    for _ in range(20):
        await gw.settle()
        if (await progress(gw, replay["id"]))["state"] == "finished":
            break
        await answer(gw, replay["id"])
    final = await progress(gw, replay["id"])
    assert final["state"] == "finished" and final["progress"] == 1.0
    assert handed < 10 and rounds >= 1
    made = await replay_jobs(gw, replay["id"])
    # the newest 10 inputs, each once per arm; the refused one never sent
    assert {r.shadow_of for r in made} == set(recorded[1:10])
    assert len({(r.shadow_of, r.arm) for r in made}) == len(made)
    assert final["inputs"] == {"total": 10, "sent": 9, "skipped": 1, "left": 0}
    assert sum(r.arm == "baseline" for r in made) == 2  # 25 % of the positions 1..9 drawn
    assert {r.provider for r in made if r.arm == "shadow"} == {"fake2"}
    assert {r.route for r in made} == {ROUTE}  # imported inputs too (route acme/echo)
    report = await gw.client.get(f"{REPLAYS}/{replay['id']}/report?format=json", headers=VIEWER)
    shown = await report.json()
    assert shown["replay"]["id"] == replay["id"] and shown["pairs"] == 9
    assert shown["baseline_pairs"] == 2 and shown["differences"]["count"] == 0
    live = await (await gw.client.get(f"/admin/routes/{ROUTE}/shadow-report?format=json",
                                      headers=VIEWER)).json()
    assert live["pairs"] == 0 and live["replay"] is None  # the live report is not the replay's
    md = await (await gw.client.get(f"{REPLAYS}/{replay['id']}/report?format=md",
                                    headers=VIEWER)).text()
    assert md.startswith(f"# Shadow report (replay): {ROUTE}")
    assert f"replay {replay['id']} (finished)" in md and "10 inputs, 9 sent, 1 skipped" in md


async def test_replay_jobs_are_hidden_from_the_app_and_send_no_webhooks(gw):
    await record(gw, ROUTE, 3)
    replay = await start(gw)
    await gw.settle()
    await answer(gw, replay["id"])
    made = await replay_jobs(gw, replay["id"])
    assert made
    listing = await (await gw.client.get("/v1/predictions", headers=gw.headers)).json()
    assert not {p["id"] for p in listing["results"]} & {r.id for r in made}
    got = await gw.client.get(f"/v1/predictions/{made[0].id}", headers=gw.headers)
    assert got.status == 404
    async with gw.store.engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(outbox))).scalar() == 0


async def _replay_rows(gateway: GatewayHarness) -> list[Any]:
    async with gateway.store.engine.connect() as conn:
        return list(await conn.execute(sa.select(shadow_replays).order_by(shadow_replays.c.id)))


@pytest.mark.parametrize(("path", "body", "headers", "status", "detail"), [
    ("/admin/routes/acme/nothing/replays", {}, ADMIN, 404, "does not exist"),
    ("/admin/routes/acme/plain/replays", {}, ADMIN, 409, "no candidate"),
    ("/admin/routes/acme/nopolicy/replays", {}, ADMIN, 409, "no shadow_policy"),
    (REPLAYS, {"since": "yesterday"}, ADMIN, 422, "since"),
    (REPLAYS, {"since": "2999-01-01T00:00:00Z"}, ADMIN, 422, "in the future"),
    (REPLAYS, {"since": 7}, ADMIN, 422, "since"),
    (REPLAYS, {"limit": 0}, ADMIN, 422, "limit"),
    (REPLAYS, {"limit": -3}, ADMIN, 422, "limit"),
    (REPLAYS, {"limit": "10"}, ADMIN, 422, "limit"),
    (REPLAYS, {"baseline_percent": 101}, ADMIN, 422, "baseline_percent"),
    (REPLAYS, {"baseline_percent": -1}, ADMIN, 422, "baseline_percent"),
    (REPLAYS, {"baseline_percent": True}, ADMIN, 422, "baseline_percent"),
    (REPLAYS, {"limt": 10}, ADMIN, 422, "unknown field"),
    (REPLAYS, {}, VIEWER, 403, "viewer"),
])
async def test_bad_starts_are_problems_that_change_nothing(gw, path, body, headers, status,
                                                           detail):
    await record(gw, ROUTE, 2)
    response = await gw.client.post(path, json=body, headers=headers)
    assert response.status == status, await response.text()
    assert response.content_type == "application/problem+json"
    assert detail in (await response.json())["detail"]
    assert await _replay_rows(gw) == []


async def test_a_second_running_replay_of_a_route_is_a_conflict(gw):
    await record(gw, ROUTE, 2)
    first = await start(gw)
    second = await gw.client.post(REPLAYS, json={}, headers=ADMIN)
    assert second.status == 409
    assert first["id"] in (await second.json())["detail"]
    assert [r.id for r in await _replay_rows(gw)] == [first["id"]]
    again = await gw.client.post(f"{REPLAYS}/{first['id']}/resume", headers=ADMIN)
    assert again.status == 409  # running, not stopped
    gone = await gw.client.post(f"{REPLAYS}/nosuchreplay/stop", headers=ADMIN)
    assert gone.status == 404
    viewer = await gw.client.post(f"{REPLAYS}/{first['id']}/stop", headers=VIEWER)
    assert viewer.status == 403
    assert (await progress(gw, first["id"]))["state"] == "running"
    listed = await (await gw.client.get(REPLAYS, headers=VIEWER)).json()
    assert [r["id"] for r in listed["results"]] == [first["id"]]


@pytest.mark.every_backend
async def test_one_gateway_process_at_a_time_holds_a_replay(gw):
    await record(gw, ROUTE, 2)
    replay = await start(gw)
    store = ReplayStore(gw.store.engine, clock=gw.clock)
    assert [r.id for r in await store.lease("process-a", 30.0)] == [replay["id"]]
    assert await store.lease("process-b", 30.0) == []  # held by a
    assert [r.id for r in await store.lease("process-a", 30.0)] == [replay["id"]]  # renewed
    gw.clock.advance(31.0)
    assert [r.id for r in await store.lease("process-b", 30.0)] == [replay["id"]]  # ran out
    held = await store.get(replay["id"])
    inputs = await store.next_inputs(held, (ROUTE,), 2)
    assert not await store.hand_out(held, "process-a", inputs, [], 0)  # a lost its lease
    assert (await store.get(replay["id"])).sent == 0


async def test_a_replay_shadow_over_the_budget_is_put_back_not_dropped(make_gateway):
    gw = await make_gateway(**_sections(shadow_budget={"max_concurrent": 1,
                                                       "max_per_hour": 1000}))
    await record(gw, ROUTE, 2)
    replay = await start(gw)
    await gw.settle()
    made = await replay_jobs(gw, replay["id"])
    assert len(made) == 1 and made[0].submitted_at is not None  # the budget's one slot
    # a second one claimed in the same instant (live shadows took the room meanwhile)
    late = Job.model_validate({**made[0]._mapping, "id": "a" * 26, "submitted_at": None,
                               "state": "queued"})
    live = late.model_copy(update={"id": "b" * 26, "replay_id": None})
    back: list[tuple[str, Any]] = []

    async def put_back(job_id: str, *, next_attempt_at: Any) -> None:
        back.append((job_id, next_attempt_at))

    before = gw.clock.now()
    keep, drop = await gw.app[keys.ROUTES].shadow_gate().split([late, live], put_back)
    assert (keep, drop) == ([], [live])  # the live one is dropped, as always
    [(job_id, due)] = back  # the replay's is due again once the budget may have room
    assert job_id == late.id
    assert before + timedelta(seconds=REPLAY_RETRY_S) <= due <= gw.clock.now() + timedelta(
        seconds=REPLAY_RETRY_S)
