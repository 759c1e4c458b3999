"""Shadow runs: a hidden copy of sampled control predictions on the candidate."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from contracts.job import JobState
from gateway.http import keys
from gateway.rollout.shadowgate import DROPPED, SKIPPED
from gateway.store.retention import RetentionStore
from gateway.store.schema import jobs, outbox, shadow_comparisons
from shadow import compare as shadow_compare
from tests.support.gateway import VERSION, GatewayHarness

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_shadow_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _sections(**route: Any) -> dict[str, Any]:
    return {
        # room for every job and every shadow: a dropped shadow makes no pair
        "providers": {"fake": {"kind": "fake", "max_concurrency": 50},
                      "fake2": {"kind": "fake", "max_concurrency": 50}},
        "routes": [
            {"model": "acme/echo", "version": VERSION, "provider": "fake",
             "candidate": "fake2", "shadow_percent": 100, "baseline_percent": 0,
             "shadow_policy": {"allow_fields": ["prompt", "n"], "max_input_bytes": 200,
                               "rules": [{"field": "n", "max": 5}]},
             "shadow_budget": {"max_concurrent": 50, "max_per_hour": 1000},
             **route},
        ],
        "admin": {"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]},
    }


@pytest.fixture
async def shadowed(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(**_sections())


async def _rows(gateway: GatewayHarness) -> list[Any]:
    async with gateway.store.engine.connect() as conn:
        return list(await conn.execute(sa.select(jobs).order_by(jobs.c.created_at, jobs.c.id)))


async def _create(gateway: GatewayHarness, **headers: str) -> dict[str, Any]:
    body = {"version": VERSION, "input": {"prompt": "x", "n": 1},
            "webhook": "http://127.0.0.1:9/hook"}
    return await gateway.create(body, **headers)


async def test_a_shadow_is_a_hidden_linked_row_on_the_candidate(shadowed):
    made = await _create(shadowed, **{"Idempotency-Key": "k1"})
    again = await _create(shadowed, **{"Idempotency-Key": "k1"})
    assert again["id"] == made["id"]
    rows = await _rows(shadowed)
    assert len(rows) == 2  # the replay made no second shadow
    primary, shadow = sorted(rows, key=lambda r: r.arm)
    assert (primary.arm, primary.provider) == ("control", "fake")
    assert (shadow.arm, shadow.provider, shadow.shadow_of) == ("shadow", "fake2", made["id"])
    assert shadow.webhook is None and shadow.idempotency_key is None
    assert shadow.input == {} and primary.input == {"prompt": "x", "n": 1}  # by reference
    # hidden from the app: not listed, not readable, not cancellable
    listing = await (await shadowed.client.get("/v1/predictions", headers=shadowed.headers)).json()
    assert [p["id"] for p in listing["results"]] == [made["id"]]
    got = await shadowed.client.get(f"/v1/predictions/{shadow.id}", headers=shadowed.headers)
    assert got.status == 404
    # operators see it
    owner = await (await shadowed.client.get(f"/admin/predictions/{made['id']}",
                                             headers=ADMIN)).json()
    assert owner["shadows"] == [{"id": shadow.id, "arm": "shadow", "provider": "fake2",
                                 "state": "creating", "skipped": None}]


async def test_a_primarys_skipped_shadows_are_listed_as_skips_with_their_reason(
    shadowed: GatewayHarness,
) -> None:
    """A skip row (docs/shadow.md, "Skips") is the record that the primary got no shadow,
    and why: the operators' view of the primary lists it as skipped with the report's
    reason, not as a shadow prediction that was canceled or failed."""
    async def shadows_of(body_input: dict[str, Any]) -> list[dict[str, Any]]:
        made = await shadowed.create({"version": VERSION, "input": body_input})
        await shadowed.settle()
        response = await shadowed.client.get(f"/admin/predictions/{made['id']}",
                                             headers=ADMIN)
        listed: list[dict[str, Any]] = (await response.json())["shadows"]
        return listed

    sent = await shadows_of({"prompt": "x", "n": 1})
    assert [(s["state"], s["skipped"]) for s in sent] == [("queued", None)]
    field = await shadows_of({"prompt": "x", "n": 9})  # the rule says n <= 5
    assert [(s["arm"], s["state"]) for s in field] == [("shadow", "canceled")]
    assert field[0]["skipped"]["reason"] == "policy_field"
    assert field[0]["skipped"]["error"].startswith(SKIPPED)
    size = await shadows_of({"prompt": "x" * 300, "n": 1})  # over max_input_bytes (200)
    assert size[0]["skipped"]["reason"] == "policy_size"
    shadowed.app[keys.PROVIDERS]["fake2"].adapter.reject = True  # type: ignore[attr-defined]
    refused = await shadows_of({"prompt": "x", "n": 2})
    assert refused[0]["state"] == "failed" and refused[0]["skipped"]["reason"] == (
        "provider_refused")


async def test_a_shadow_canceled_with_its_primary_before_it_was_sent_is_no_skip(
    shadowed: GatewayHarness,
) -> None:
    """The app cancels the primary before its shadow is sent: the shadow ends canceled
    with it. That is no skip; the report counted it ``provider_refused`` (the reason of
    any shadow that ended unsent without a policy, budget or wait error)."""
    made = await shadowed.create({"version": VERSION, "input": {"prompt": "x", "n": 1}})
    response = await shadowed.client.post(f"/v1/predictions/{made['id']}/cancel",
                                          headers=shadowed.headers)
    assert response.status == 200
    await shadowed.settle()
    owner = await (await shadowed.client.get(f"/admin/predictions/{made['id']}",
                                             headers=ADMIN)).json()
    assert owner["state"] == "canceled"
    assert [(s["state"], s["skipped"]) for s in owner["shadows"]] == [("canceled", None)]
    report = await shadowed.client.get(f"/admin/routes/{ROUTE}/shadow-report?format=json",
                                       headers=ADMIN)
    assert report.status == 200
    assert (await report.json())["coverage"] == {"shadowed": 0, "skipped": {}}


async def test_the_shadow_never_touches_the_primary_or_the_apps_webhooks(shadowed):
    made = await _create(shadowed)
    await shadowed.settle()
    shadow = next(r for r in await _rows(shadowed) if r.arm == "shadow")
    assert await shadowed.deliver(shadow.id, JobState.FAILED, error="candidate broke") == 200
    assert await shadowed.deliver(made["id"], JobState.COMPLETED, output="X") == 200
    await shadowed.settle()
    assert (await shadowed.get(made["id"]))["status"] == "succeeded"
    async with shadowed.store.engine.connect() as conn:
        events = list(await conn.execute(sa.select(outbox.c.job_id)))
    assert events and {e.job_id for e in events} == {made["id"]}


async def test_cancelling_the_primary_cancels_its_shadow(shadowed):
    made = await _create(shadowed)
    await shadowed.settle()
    response = await shadowed.client.post(f"/v1/predictions/{made['id']}/cancel",
                                          headers=shadowed.headers)
    assert response.status == 200
    await shadowed.settle()
    shadow = next(r for r in await _rows(shadowed) if r.arm == "shadow")
    assert shadow.cancel_requested_at is not None
    fake2 = shadowed.app[keys.PROVIDERS]["fake2"].adapter
    assert f"fake-{shadow.id}" in fake2.cancel_calls  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "data",
    [{"prompt": "x", "n": 9}, {"prompt": "x", "n": 1, "seed": 3}, {"prompt": "x" * 300, "n": 1}],
)
async def test_inputs_the_policy_refuses_are_not_shadowed_but_recorded_as_skips(shadowed, data):
    await shadowed.create({"version": VERSION, "input": data})
    await shadowed.settle()
    rows = {r.arm: r for r in await _rows(shadowed)}  # same created_at: ordered by id
    assert sorted(rows) == ["control", "shadow"]
    skip = rows["shadow"]  # born canceled with the policy's reason, never sent, no input copy
    assert (skip.state, skip.submitted_at, skip.input) == ("canceled", None, {})
    assert skip.error.startswith(SKIPPED)
    assert shadowed.app[keys.PROVIDERS]["fake2"].adapter.submitted == []  # type: ignore[attr-defined]


async def test_over_budget_shadows_are_dropped_not_queued(make_gateway):
    sections = _sections(shadow_budget={"max_concurrent": 1, "max_per_hour": 10})
    sections["providers"]["fake2"]["max_concurrency"] = 10
    gateway = await make_gateway(**sections)
    for _ in range(3):
        await _create(gateway)
    await gateway.settle()
    shadows = [r for r in await _rows(gateway) if r.arm == "shadow"]
    dropped = [r for r in shadows if r.state == "canceled"]
    assert len(dropped) == 2 and all(r.error == DROPPED for r in dropped)
    assert len(gateway.app[keys.PROVIDERS]["fake2"].adapter.submitted) == 1  # type: ignore[attr-defined]
    metrics = await (await gateway.client.get("/metrics")).text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }
    assert samples[("cutover_shadows_total", (("outcome", "dropped"), ("route", ROUTE)))] == 2
    # a dropped shadow never reached the candidate: no pair, so no status "break"
    for row in await _rows(gateway):
        if row.state != "canceled":
            assert await gateway.deliver(row.id, JobState.COMPLETED, output="X") == 200
    await gateway.settle()
    report = await (await gateway.client.get(f"/admin/routes/{ROUTE}/shadow-report",
                                             headers=ADMIN, params={"format": "json"})).json()
    assert (report["pairs"], report["contract_breaks"]["count"]) == (1, 0)


async def test_set_shadow_is_audited_and_zero_stops_shadows(shadowed):
    response = await shadowed.client.post(f"/admin/routes/{ROUTE}/shadow", headers=ADMIN,
                                          json={"percent": 0, "reason": "enough pairs"})
    assert response.status == 200, await response.text()
    assert (await response.json())["action"] == "set-shadow"
    await _create(shadowed)
    assert [r.arm for r in await _rows(shadowed)] == ["control"]


async def test_a_baseline_share_runs_the_control_twice(make_gateway):
    gateway = await make_gateway(**_sections(baseline_percent=100))
    made = await _create(gateway)
    rows = {r.arm: r for r in await _rows(gateway)}
    assert set(rows) == {"control", "baseline"}
    assert (rows["baseline"].provider, rows["baseline"].shadow_of) == ("fake", made["id"])
    listing = await (await gateway.client.get("/v1/predictions", headers=gateway.headers)).json()
    assert [p["id"] for p in listing["results"]] == [made["id"]]


async def test_a_hidden_copy_never_takes_a_slot_ahead_of_an_apps_prediction(make_gateway):
    sections = _sections(baseline_percent=100)  # the copies on the control
    sections["providers"]["fake"]["max_concurrency"] = 1
    gateway = await make_gateway(**sections)
    first = await _create(gateway)  # its baseline copy waits, created before the second
    second = await _create(gateway)
    await gateway.settle()
    fake = gateway.app[keys.PROVIDERS]["fake"].adapter
    assert [r.job_id for r in fake.submitted] == [first["id"]]  # one slot (max_concurrency 1)
    assert await gateway.deliver(first["id"], JobState.COMPLETED, output="X") == 200
    await gateway.settle()
    assert [r.job_id for r in fake.submitted][1] == second["id"]  # the app's, not the copy


async def test_without_a_policy_nothing_is_shadowed(make_gateway):
    sections = _sections()
    sections["routes"][0].pop("shadow_policy")
    gateway = await make_gateway(**sections)
    await _create(gateway)
    assert [r.arm for r in await _rows(gateway)] == ["control"]


async def _pairs_with_breaks(gateway: GatewayHarness, count: int) -> None:
    """``count`` shadowed predictions whose candidate fails where the control succeeds."""
    for _ in range(count):
        await _create(gateway, **{"X-Caller": "steady"})
    await gateway.settle()
    for row in await _rows(gateway):
        if row.arm == "control":
            await gateway.deliver(row.id, JobState.COMPLETED, output="X")
        elif row.arm == "shadow":
            await gateway.deliver(row.id, JobState.FAILED, error="ValueError: nope")
    await gateway.settle()


def _control_percent() -> float:
    """A canary percent at which the caller ``steady`` stays on the control arm."""
    from gateway.rollout import canary

    return next(p for p in (10, 5, 3, 1) if canary.choose_arm(
        ROUTE, "header:steady", p) == "control")


async def test_shadow_contract_breaks_make_the_guard_roll_back(make_gateway):
    sections = _sections(caller_key="header:X-Caller",
                         guard={"max_contract_break_rate": 0.05, "min_samples": 5})
    gateway = await make_gateway(**sections)
    response = await gateway.client.post(f"/admin/routes/{ROUTE}/canary", headers=ADMIN,
                                         json={"percent": _control_percent(), "reason": "r"})
    assert response.status == 200
    await _pairs_with_breaks(gateway, 12)
    shown = await (await gateway.client.get(f"/admin/routes/{ROUTE}", headers=ADMIN)).json()
    assert shown["spec"]["canary_percent"] == 0
    last = shown["changes"][0]
    assert (last["who"], last["action"]) == ("guard", "rollback")
    assert "contract breaks in 12 of 12" in last["reason"]
    assert last["evidence"]["shadow_pairs"] == {"pairs": 12, "breaks": 12}


async def test_the_report_shows_the_pairs_in_every_format(make_gateway, tmp_path, capsys):
    gateway = await make_gateway(**_sections())
    await _pairs_with_breaks(gateway, 3)
    url = f"/admin/routes/{ROUTE}/shadow-report"
    as_json = await gateway.client.get(url, headers=ADMIN, params={"format": "json"})
    assert as_json.status == 200
    report = await as_json.json()
    assert (report["route"], report["pairs"]) == (ROUTE, 3)
    assert report["contract_breaks"]["count"] == 3
    page = await gateway.client.get(url, headers=ADMIN)
    assert page.content_type == "text/html" and "<svg" in await page.text()
    markdown = await gateway.client.get(url, headers=ADMIN, params={"format": "md"})
    assert ROUTE in await markdown.text()
    for params, status in (({"format": "pdf"}, 422), ({"since": "yesterday"}, 422)):
        assert (await gateway.client.get(url, headers=ADMIN, params=params)).status == status
    missing = await gateway.client.get("/admin/routes/acme/nope/shadow-report", headers=ADMIN)
    assert missing.status == 404


async def test_each_pair_is_compared_once_kept_and_dropped_with_its_data(make_gateway,
                                                                          monkeypatch):
    gateway = await make_gateway(**_sections())
    compared: list[str] = []
    real = shadow_compare.compare

    async def counting(*args: Any, **kwargs: Any) -> Any:
        compared.append(kwargs["pair_id"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(shadow_compare, "compare", counting)

    async def reported() -> dict[str, Any]:
        response = await gateway.client.get(f"/admin/routes/{ROUTE}/shadow-report",
                                            headers=ADMIN, params={"format": "json"})
        assert response.status == 200
        return await response.json()

    await _pairs_with_breaks(gateway, 3)
    assert ((await reported())["pairs"], len(compared)) == (3, 3)
    again = await reported()  # read back, not compared again
    assert (again["pairs"], again["contract_breaks"]["count"], len(compared)) == (3, 3, 3)
    async with gateway.store.engine.connect() as conn:
        kept = list(await conn.execute(sa.select(shadow_comparisons)))
    assert sorted(r.shadow_id for r in kept) == sorted(compared)
    assert {r.kind for r in kept} == {"shadow"}

    await _pairs_with_breaks(gateway, 1)  # one more pair: only it is compared
    assert ((await reported())["pairs"], len(compared)) == (4, 4)
    assert await RetentionStore(gateway.store.engine).remove_data(compared[0])
    assert ((await reported())["pairs"], len(compared)) == (3, 4)  # gone with its data
