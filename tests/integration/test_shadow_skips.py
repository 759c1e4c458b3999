"""Every eligible primary gets a shadow or a recorded skip with its reason (docs/shadow.md,
"Skips"): a 3 MB ``data:`` input over the default 64 KB policy limit is a skip row (no
copy of the input), counted in /metrics and in the report's "n shadowed, m skipped"
line in every format; a report window starting in the future is refused."""

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
        providers={"fake": {"kind": "fake", "max_concurrency": 50},
                   "fake2": {"kind": "fake", "max_concurrency": 50}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "candidate": "fake2", "shadow_percent": 100, "baseline_percent": 0,
                 "shadow_policy": {"allow_fields": ["prompt", "image"]}}],
        admin={"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]},
    )


async def _report(gw: GatewayHarness, fmt: str, **params: str) -> Any:
    return await gw.client.get(f"/admin/routes/{ROUTE}/shadow-report", headers=ADMIN,
                               params={"format": fmt, **params})


@pytest.mark.every_backend  # the skip rows and the report's tally are the store's SQL
async def test_a_3mb_input_over_the_policy_limit_is_a_recorded_skip_never_silent(gw):
    inputs = [{"prompt": "a", "image": BIG}] * 3 + [{"prompt": "b"}] * 2 + [{"seed": 1}]
    for data in inputs:  # a file-like body: aiohttp warns about 3 MB of raw bytes
        body = io.BytesIO(json.dumps({"version": VERSION, "input": data}).encode())
        response = await gw.client.post("/v1/predictions", data=body, headers={
            **gw.headers, "Content-Type": "application/json"})
        assert response.status == 201, await response.text()
    await gw.settle()
    async with gw.store.engine.connect() as conn:
        hidden = (await conn.execute(sa.select(jobs).where(jobs.c.arm == "shadow"))).all()
    assert len(hidden) == len(inputs)  # one shadow or skip per eligible primary
    skips = [row for row in hidden if row.submitted_at is None]
    assert len(skips) == 4 and all(row.state == "canceled" for row in skips)
    assert all(row.error.startswith(SKIPPED) and row.input == {} for row in skips)
    metrics = await (await gw.client.get("/metrics")).text()
    counted = {s.labels["reason"]: s.value
               for family in text_string_to_metric_families(metrics)
               for s in family.samples if s.name == "cutover_shadow_skips_total"
               and s.labels["route"] == ROUTE}
    assert counted == {"policy_size": 3, "policy_field": 1}
    line = "2 shadowed, 4 skipped: 1 policy_field, 3 policy_size"
    found = await (await _report(gw, "json")).json()
    assert found["coverage"] == {"shadowed": 2, "skipped": {"policy_size": 3, "policy_field": 1}}
    assert f"Shadows: {line}." in await (await _report(gw, "md")).text()
    assert f'<p id="coverage">Shadows: {line}.</p>' in await (await _report(gw, "html")).text()


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
