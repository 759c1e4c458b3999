"""Every eligible primary gets a shadow or a recorded skip with its reason (docs/shadow.md,
"Skips"): a 3 MB ``data:`` input goes to the shadow by reference (the shadow row stores
no copy, the default 64 KB policy limit counts the file as its reference), a policy or
provider refusal is a skip counted in /metrics and in the report's "n shadowed, m
skipped" line in every format; a report window starting in the future is refused."""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import LOOPS
from gateway.http import keys
from gateway.rollout.shadowgate import SKIPPED
from gateway.store.schema import jobs
from tests.integration.test_route_cli_output import _config, _cutover
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.timeout(60)

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_skips_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
BIG = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + bytes(3 * 1024 * 1024)).decode()


@pytest.fixture
async def gw(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": 200},
                   "fake2": {"kind": "fake", "max_concurrency": 200}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "candidate": "fake2", "shadow_percent": 100, "baseline_percent": 0,
                 "shadow_policy": {"allow_fields": ["prompt", "image"]},
                 "shadow_budget": {"max_concurrent": 200, "max_per_hour": 1000}}],
        admin={"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]},
    )


async def _report(gw: GatewayHarness, fmt: str, **params: str) -> Any:
    return await gw.client.get(f"/admin/routes/{ROUTE}/shadow-report", headers=ADMIN,
                               params={"format": fmt, **params})


async def _post(gw: GatewayHarness, data: dict[str, Any]) -> None:
    body = io.BytesIO(json.dumps({"version": VERSION, "input": data}).encode())
    response = await gw.client.post("/v1/predictions", data=body, headers={  # file-like:
        **gw.headers, "Content-Type": "application/json"})  # aiohttp warns of 3 MB bytes
    assert response.status == 201, await response.text()


async def _dispatch(gw: GatewayHarness) -> None:
    """The dispatcher's rounds until it submits nothing more (the fakes never finish, so
    other loops keep polling and ``settle`` would not end)."""
    dispatcher = next(loop for loop in gw.app[LOOPS] if loop.name == "dispatcher")
    for _ in range(20):
        if await dispatcher.run_once() == 0:
            return
    raise AssertionError("the dispatcher still had work after 20 rounds")


async def _skips_counted(gw: GatewayHarness) -> dict[str, float]:
    metrics = await (await gw.client.get("/metrics")).text()
    return {s.labels["reason"]: s.value
            for family in text_string_to_metric_families(metrics)
            for s in family.samples if s.name == "cutover_shadow_skips_total"
            and s.labels["route"] == ROUTE}


@pytest.mark.every_backend  # the stored input sizes and the report's tally are the store's SQL
async def test_3mb_inputs_are_shadowed_by_reference_and_every_primary_is_accounted(gw):
    inputs = [{"prompt": f"p{i}", "image": BIG} for i in range(50)]
    inputs += [{"prompt": f"p{i}"} for i in range(50)] + [{"seed": 1}]
    for data in inputs:
        await _post(gw, data)
    await _dispatch(gw)
    size = sa.func.length(sa.cast(jobs.c.input, sa.Text))
    async with gw.store.engine.connect() as conn:
        hidden = (await conn.execute(sa.select(jobs, size.label("size"))
                                     .where(jobs.c.arm == "shadow"))).all()
        primary = (await conn.execute(sa.select(size).where(jobs.c.arm == "control"))).scalars()
        primary_sizes = sorted(primary, reverse=True)
    assert len(hidden) == len(inputs)  # one shadow or skip per eligible primary
    assert max(row.size for row in hidden) < 100  # references, never a copy of 3 MB
    assert primary_sizes[49] > 3 * 1024 * 1024 > primary_sizes[50]  # the one copy each
    skips = [row for row in hidden if row.submitted_at is None]
    assert len(skips) == 1 and skips[0].state == "canceled"
    assert skips[0].error.startswith(SKIPPED) and skips[0].input == {}
    reached = [request.input for request in gw.app[keys.PROVIDERS]["fake2"].adapter.submitted]
    assert sorted(reached, key=str) == sorted(inputs[:-1], key=str)  # each its full input
    assert await _skips_counted(gw) == {"policy_field": 1}
    line = "100 shadowed, 1 skipped: 1 policy_field"
    found = await (await _report(gw, "json")).json()
    assert found["coverage"] == {"shadowed": 100, "skipped": {"policy_field": 1}}
    assert f"Shadows: {line}." in await (await _report(gw, "md")).text()
    assert f'<p id="coverage">Shadows: {line}.</p>' in await (await _report(gw, "html")).text()


async def test_a_shadow_its_candidate_refuses_is_a_counted_provider_refused_skip(gw):
    gw.app[keys.PROVIDERS]["fake2"].adapter.reject = True
    for i in range(3):
        await _post(gw, {"prompt": f"p{i}"})
    await gw.settle()
    async with gw.store.engine.connect() as conn:
        hidden = (await conn.execute(sa.select(jobs).where(jobs.c.arm == "shadow"))).all()
    assert [row.state for row in hidden] == ["failed"] * 3
    assert all("reject=True" in row.error for row in hidden)
    assert await _skips_counted(gw) == {"provider_refused": 3}
    found = await (await _report(gw, "json")).json()
    assert found["coverage"] == {"shadowed": 0, "skipped": {"provider_refused": 3}}


async def test_a_report_window_starting_in_the_future_is_a_422(gw):
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    response = await _report(gw, "json", since=later)
    assert response.status == 422
    assert "is in the future" in (await response.json())["detail"]
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert (await _report(gw, "json", since=past)).status == 200


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_cli_report_with_a_future_since_exits_1_naming_it(
    backend: str, database_url: str, tmp_path: Path
) -> None:
    config = str(_config(tmp_path, database_url))
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    code, out, err = await _cutover("shadow", "report", "--route", "acme/plain", "--since",
                                    later, "--config", config)
    assert (code, out) == (1, "")
    assert err.startswith("cutover: --since ") and "is in the future" in err
