"""A shadow whose output fails the model's ``Output`` schema is a contract break in the
shadow report, and enough of them roll the canary back (gateway/translation/conformance.py,
docs/translation.md "Output conformance")."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.store.schema import jobs
from tests.integration.test_shadow_runs import ADMIN, ROUTE, _control_percent, _sections
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

SCHEMA = {"components": {"schemas": {
    "Input": {"type": "object", "required": ["prompt"],
              "properties": {"prompt": {"type": "string"}, "n": {"type": "integer"}}},
    "Output": {"type": "array", "items": {"type": "string"}, "x-cog-array-type": "iterator"},
}}}


async def _pairs(gateway: GatewayHarness, count: int) -> None:
    """``count`` shadowed predictions: the control's output conforms, the shadow's has a
    dict among its strings (both providers say they succeeded)."""
    for _ in range(count):
        await gateway.create({"version": VERSION, "input": {"prompt": "x", "n": 1}},
                             **{"X-Caller": "steady"})
    await gateway.settle()
    async with gateway.store.engine.connect() as conn:
        rows = list(await conn.execute(sa.select(jobs.c.id, jobs.c.arm)))
    for row in rows:
        bad = row.arm == "shadow"
        output = ["X", {"error": "boom"}] if bad else ["X"]
        await gateway.deliver(row.id, JobState.COMPLETED, output=output)
    await gateway.settle()


async def test_a_shadow_off_the_schema_is_a_contract_break(make_gateway: Any) -> None:
    gateway: GatewayHarness = await make_gateway(**_sections(openapi_schema=SCHEMA))
    await _pairs(gateway, 3)
    report = await (await gateway.client.get(f"/admin/routes/{ROUTE}/shadow-report",
                                             headers=ADMIN, params={"format": "json"})).json()
    assert (report["pairs"], report["contract_breaks"]["count"]) == (3, 3)
    # the candidate failed (not merely a different JSON shape that succeeded)
    kinds = {b["kind"] for pair in report["worst"] for b in pair["judgement"]["breaks"]}
    assert kinds == {"status"}


async def test_shadows_off_the_schema_roll_the_canary_back(make_gateway: Any) -> None:
    gateway: GatewayHarness = await make_gateway(**_sections(
        openapi_schema=SCHEMA, caller_key="header:X-Caller",
        guard={"max_contract_break_rate": 0.05, "min_samples": 5}))
    response = await gateway.client.post(f"/admin/routes/{ROUTE}/canary", headers=ADMIN,
                                         json={"percent": _control_percent(), "reason": "r"})
    assert response.status == 200
    await _pairs(gateway, 12)
    shown = await (await gateway.client.get(f"/admin/routes/{ROUTE}", headers=ADMIN)).json()
    assert shown["spec"]["canary_percent"] == 0
    assert (shown["changes"][0]["who"], shown["changes"][0]["action"]) == ("guard", "rollback")


async def test_data_retention_removes_the_raw_output_too(make_gateway: Any) -> None:
    from datetime import timedelta

    from tests.integration.test_retention import retention

    gateway: GatewayHarness = await make_gateway(
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "openapi_schema": SCHEMA}],
        retention={"data_retention_s": 3600},
    )
    created = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await gateway.deliver(created["id"], JobState.COMPLETED, output=[{"secret": "raw"}])
    assert (await gateway.wait_for(created["id"], "failed"))["output"] is None
    assert (await gateway.store.get(created["id"])).raw_output == [{"secret": "raw"}]
    gateway.clock.advance(timedelta(hours=2))
    assert await retention(gateway, data_s=3600).run_once() >= 1
    assert (await gateway.store.get(created["id"])).raw_output is None
