"""Operators see every tenant's predictions, each with its tenant (docs/security.md):
``GET /admin/predictions`` (all, or ``?tenant=``), ``GET /admin/predictions/{id}``, the
dead letters of the admin API and ``cutover webhooks list-dead`` (a TENANT column when
``[[tenants]]`` are configured)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.integration.test_webhooks_admin import cutover, dead_job, receiver  # noqa: F401
from tests.support.gateway import TOKEN, GatewayHarness, settings_dict
from tests.support.receiver import Receiver

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

TOKEN_A = "r8_tenant_a_token"  # test values, not credentials
ADMIN = {"Authorization": "Bearer adm_token"}
TENANTS = [{"name": "a", "api_tokens": [TOKEN_A]}]
SECTIONS: dict[str, Any] = {"tenants": TENANTS, "admin": {"tokens": ["adm_token"]},
                            "webhooks": {"retry_delays_s": [], "allow_hosts": ["127.0.0.1"]}}


async def _create(gw: GatewayHarness, token: str) -> str:
    body = {"input": {"text": "hi"}}
    response = await gw.client.post("/v1/models/acme/plain/predictions", json=body,
                                    headers={"Authorization": f"Bearer {token}"})
    assert response.status == 201, await response.text()
    return str((await response.json())["id"])


async def test_admin_sees_every_tenants_predictions_with_the_tenant(make_gateway: Any):
    gw = await make_gateway(**SECTIONS)
    mine, theirs = await _create(gw, TOKEN_A), await _create(gw, TOKEN)
    for job_id, tenant in ((mine, "a"), (theirs, "default")):
        response = await gw.client.get(f"/admin/predictions/{job_id}", headers=ADMIN)
        assert (await response.json())["tenant"] == tenant
    response = await gw.client.get("/admin/predictions", headers=ADMIN)
    listed = {p["id"]: p["tenant"] for p in (await response.json())["results"]}
    assert listed == {mine: "a", theirs: "default"}
    response = await gw.client.get("/admin/predictions?tenant=a", headers=ADMIN)
    assert [p["id"] for p in (await response.json())["results"]] == [mine]
    response = await gw.client.get("/admin/predictions", headers={"Authorization":
                                                                  f"Bearer {TOKEN_A}"})
    assert response.status == 401  # an API token is not an admin token


async def test_dead_letters_name_their_tenant(
    make_gateway: Any, receiver: Receiver, database_url: str, tmp_path: Path,  # noqa: F811
):
    gw = await make_gateway(**SECTIONS)
    gw.headers = {"Authorization": f"Bearer {TOKEN_A}"}
    mine = await dead_job(gw, receiver)
    gw.headers = {"Authorization": f"Bearer {TOKEN}"}
    theirs = await dead_job(gw, receiver)
    response = await gw.client.get("/admin/webhooks/dead", headers=ADMIN)
    listed = {r["prediction_id"]: r["tenant"] for r in (await response.json())["results"]}
    assert listed == {mine: "a", theirs: "default"}
    config = tmp_path / "cutover.toml"
    config.write_text(tomli_w.dumps(settings_dict(database_url, str(tmp_path / "assets"),
                                                  **SECTIONS)))
    code, out, _ = await cutover(config, "list-dead")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["ID", "MSG_ID", "PREDICTION", "TENANT"]
    assert [line.split()[2:4] for line in lines[1:]] == [[theirs, "default"], [mine, "a"]]
