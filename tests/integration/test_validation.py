"""A bad input gets Replicate's 422 naming the field, before any row or provider call
(gateway/validation.py, docs/validation.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway.store.schema import jobs
from tests.support.cog_server import CogServer
from tests.support.fixtures import ECHO_OPENAPI_SCHEMA, cog_server_with_schema  # noqa: F401
from tests.support.gateway import TOKEN, VERSION, GatewayHarness


def routes(schema: Any) -> list[dict[str, Any]]:
    return [{"model": "acme/echo", "version": VERSION, "provider": "fake",
             "openapi_schema": schema}]


async def job_count(gateway: GatewayHarness) -> int:
    async with gateway.store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(jobs))).scalar())


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"prompt": 1}, "input.prompt"),
        ({"prompt": "x", "steps": 5000}, "input.steps"),
        ({"prompt": "x", "output_kind": "video"}, "input.output_kind"),
        ({"steps": 1}, "input.prompt"),
        ({"prompt": 1, "stream": True}, "input.prompt"),
    ],
)
async def test_bad_input_is_422_with_no_row_and_no_call(
    make_gateway: Any, bad: dict[str, Any], field: str
) -> None:
    gateway = await make_gateway(routes=routes(ECHO_OPENAPI_SCHEMA))
    response = await gateway.client.post(
        "/v1/predictions", json={"version": VERSION, "input": bad}, headers=gateway.headers
    )
    assert response.status == 422
    assert response.content_type == "application/problem+json"
    assert field in (await response.json())["detail"]
    await gateway.settle()
    assert await job_count(gateway) == 0
    assert gateway.fake.submitted == []


async def test_undeclared_inputs_are_dropped_and_named_in_the_logs(make_gateway: Any) -> None:
    gateway = await make_gateway(routes=routes(ECHO_OPENAPI_SCHEMA))
    created = await gateway.create(
        {"version": VERSION, "input": {"prompt": "ok", "stream": True, "max_length": 64}}
    )
    assert created["logs"] == "Stripped unknown input fields: max_length, stream\n"
    await gateway.settle()
    assert [r.input for r in gateway.fake.submitted] == [{"prompt": "ok"}]
    await gateway.deliver(created["id"], JobState.COMPLETED, output="OK", logs="step 1/1\n")
    await gateway.settle()
    got = await gateway.get(created["id"])
    assert got["status"] == "succeeded"
    assert got["logs"] == "Stripped unknown input fields: max_length, stream\nstep 1/1\n"


async def test_strict_inputs_refuse_undeclared_fields(make_gateway: Any) -> None:
    gateway = await make_gateway(routes=[{**routes(ECHO_OPENAPI_SCHEMA)[0], "strict_inputs": True}])
    response = await gateway.client.post(
        "/v1/predictions", json={"version": VERSION, "input": {"prompt": "x", "stream": True}},
        headers=gateway.headers,
    )
    assert response.status == 422
    assert "input.stream: is not an input of this model" in (await response.json())["detail"]
    assert await job_count(gateway) == 0


async def test_good_input_runs(make_gateway: Any) -> None:
    gateway = await make_gateway(routes=routes(ECHO_OPENAPI_SCHEMA))
    await gateway.create({"version": VERSION, "input": {"prompt": "ok", "steps": 2}})
    await gateway.settle()
    assert len(gateway.fake.submitted) == 1


async def test_schema_from_a_file_is_what_the_versions_endpoint_returns(
    make_gateway: Any, tmp_path: Path
) -> None:
    path = tmp_path / "echo.json"
    path.write_text(json.dumps(ECHO_OPENAPI_SCHEMA))
    gateway = await make_gateway(routes=routes(str(path)))
    answer = await gateway.client.get(
        f"/v1/models/acme/echo/versions/{VERSION}", headers=gateway.headers
    )
    assert (await answer.json())["openapi_schema"] == ECHO_OPENAPI_SCHEMA
    response = await gateway.client.post(
        "/v1/predictions", json={"version": VERSION, "input": {}}, headers=gateway.headers
    )
    assert response.status == 422


@pytest.mark.cog
async def test_schema_read_once_from_cog(
    make_gateway: Any, cog_server_with_schema: CogServer  # noqa: F811
) -> None:
    gateway = await make_gateway(
        providers={"cog": {"kind": "cog", "base_url": cog_server_with_schema.url}},
        routes=[{"model": "acme/echo", "provider": "cog", "openapi_schema": "provider"}],
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = await gateway.client.post(
        "/v1/models/acme/echo/predictions", json={"input": {"prompt": 3}}, headers=headers
    )
    assert response.status == 422
    assert "input.prompt" in (await response.json())["detail"]
    assert await job_count(gateway) == 0
