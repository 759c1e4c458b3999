"""Dead letters: the admin API (its own tokens) and the ``cutover webhooks`` commands."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from contracts.job import JobState
from tests.support.gateway import TOKEN, GatewayHarness, settings_dict
from tests.support.outbox import make_due, observe, outbox_rows, start_job
from tests.support.receiver import Receiver

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

ADMIN_TOKEN = "adm_test_token"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
NO_RETRIES = {"retry_delays_s": []}  # the first failure dead-letters a completed event


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


@pytest.fixture
async def admin_gateway(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(webhooks=NO_RETRIES, admin={"tokens": [ADMIN_TOKEN]})


async def dead_job(gateway: GatewayHarness, receiver: Receiver, path: str = "/hook") -> str:
    """A prediction whose completed webhook got a 500 and was dead-lettered."""
    receiver.reply(500)
    job_id = await start_job(gateway, receiver.url(path), ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output=f"out-{job_id}")
    await gateway.settle()
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert row.status == "dead"
    return job_id


async def admin(gateway: GatewayHarness, method: str, path: str, **kwargs: Any) -> Any:
    response = await gateway.client.request(method, path, headers=ADMIN, **kwargs)
    body = await response.json(content_type=None)
    return response.status, body


# --- authentication --------------------------------------------------------------------------


async def test_admin_api_is_403_without_configured_tokens(gateway: GatewayHarness) -> None:
    for headers in ({}, ADMIN, gateway.headers):
        response = await gateway.client.get("/admin/webhooks/dead", headers=headers)
        assert response.status == 403
        assert response.content_type == "application/problem+json"
        assert "[admin] tokens" in (await response.json())["detail"]


async def test_admin_tokens_and_api_tokens_do_not_mix(admin_gateway: GatewayHarness) -> None:
    client = admin_gateway.client
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer nope"},
                    {"Authorization": f"Token {ADMIN_TOKEN}"}):  # fmt: skip
        response = await client.get("/admin/webhooks/dead", headers=headers)
        assert response.status == 401, headers
        assert response.content_type == "application/problem+json"
    assert (await client.get("/v1/predictions", headers=ADMIN)).status == 401
    assert (await client.get("/admin/webhooks/dead", headers=ADMIN)).status == 200


async def test_admin_without_a_trailing_slash_is_the_admin_api(
    admin_gateway: GatewayHarness,
) -> None:
    """``/admin`` itself is checked against the admin tokens, not the API tokens: the
    admin token is not refused there as an unknown API token. ``/admin/`` is the
    console's door (docs/console.md): a redirect to it, whoever asks."""
    client = admin_gateway.client
    response = await client.get("/admin", headers=ADMIN)
    assert response.status != 401, await response.text()
    refused = await client.get("/admin", headers={"Authorization": f"Bearer {TOKEN}"})
    assert refused.status == 401
    for headers in (ADMIN, {"Authorization": f"Bearer {TOKEN}"}, {}):
        landing = await client.get("/admin/", headers=headers, allow_redirects=False)
        assert (landing.status, landing.headers["Location"]) == (303, "/admin/console/")
    # a path that only begins like the admin prefix still needs an API token
    assert (await client.get("/administrator", headers=ADMIN)).status == 401


async def test_an_admin_token_that_is_not_utf8_is_401(admin_gateway: GatewayHarness) -> None:
    server = admin_gateway.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        b"GET /admin/webhooks/dead HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n"
        b"Authorization: Bearer adm_\xff\r\n\r\n"
    )
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert b"application/problem+json" in answer


# --- list, show, replay ------------------------------------------------------------------------


async def test_list_show_and_replay_one_dead_event(
    admin_gateway: GatewayHarness, receiver: Receiver
) -> None:
    gateway = admin_gateway
    job_id = await dead_job(gateway, receiver)
    status, listing = await admin(gateway, "GET", "/admin/webhooks/dead")
    assert status == 200
    (item,) = listing["results"]
    assert (item["prediction_id"], item["event"], item["status"]) == (job_id, "completed", "dead")
    assert (item["attempts"], item["last_status_code"]) == (1, 500)
    assert "payload" not in item

    for ref in (item["id"], item["msg_id"]):
        status, shown = await admin(gateway, "GET", f"/admin/webhooks/dead/{ref}")
        assert status == 200 and shown["payload"]["id"] == job_id

    status, replayed = await admin(gateway, "POST", f"/admin/webhooks/dead/{item['id']}/replay")
    assert status == 200
    assert (replayed["status"], replayed["attempts"], replayed["msg_id"]) == (
        "pending", 0, item["msg_id"],
    )  # fmt: skip
    await gateway.settle()
    assert [r.webhook_id for r in receiver.received] == [item["msg_id"]] * 2
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts) == ("delivered", 1)
    assert (await admin(gateway, "GET", "/admin/webhooks/dead"))[1]["results"] == []

    status, problem = await admin(gateway, "POST", f"/admin/webhooks/dead/{item['id']}/replay")
    assert status == 409 and "delivered, not dead" in problem["detail"]
    assert (await admin(gateway, "GET", "/admin/webhooks/dead/999999"))[0] == 404
    assert (await admin(gateway, "GET", "/admin/webhooks/dead/nonsense"))[0] == 404


async def test_list_filters_and_replay_by_time_range(
    admin_gateway: GatewayHarness, receiver: Receiver
) -> None:
    gateway = admin_gateway
    jobs = [await dead_job(gateway, receiver) for _ in range(3)]
    rows = await outbox_rows(gateway.store.engine)
    middle = rows[1].created_at
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()

    _, page = await admin(gateway, "GET", "/admin/webhooks/dead", params={"limit": "2"})
    assert [r["prediction_id"] for r in page["results"]] == [jobs[2], jobs[1]]  # newest first
    _, page = await admin(gateway, "GET", "/admin/webhooks/dead", params={"since": later})
    assert page["results"] == []
    _, page = await admin(
        gateway, "GET", "/admin/webhooks/dead", params={"until": middle.isoformat()}
    )
    assert [r["prediction_id"] for r in page["results"]] == [jobs[0]]
    for bad in ({"since": "yesterday"}, {"limit": "0"}, {"limit": "x"}):
        status, _ = await admin(gateway, "GET", "/admin/webhooks/dead", params=bad)
        assert status == 422, bad

    status, done = await admin(
        gateway, "POST", "/admin/webhooks/dead/replay", json={"since": middle.isoformat()}
    )
    assert status == 200 and done == {"replayed": 2, "ids": [rows[1].id, rows[2].id]}
    await gateway.settle()
    assert [r.status for r in await outbox_rows(gateway.store.engine)] == [
        "dead", "delivered", "delivered",
    ]  # fmt: skip
    assert (await admin(gateway, "POST", "/admin/webhooks/dead/replay", json={}))[0] == 422


async def test_replay_re_enables_an_endpoint_disabled_by_410(
    admin_gateway: GatewayHarness, receiver: Receiver
) -> None:
    gateway = admin_gateway
    receiver.reply(410)
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    _, endpoints = await admin(gateway, "GET", "/admin/webhooks/endpoints")
    assert [e["url"] for e in endpoints["results"]] == [receiver.url()]
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (await admin(gateway, "POST", f"/admin/webhooks/dead/{row.id}/replay"))[0] == 200
    await gateway.settle()
    assert len(receiver.received) == 2
    assert (await admin(gateway, "GET", "/admin/webhooks/endpoints"))[1]["results"] == []


async def test_odd_event_ids_and_out_of_range_times_are_4xx_not_500(
    admin_gateway: GatewayHarness,
) -> None:
    # "²" passes str.isdigit() but not int(); an Arabic-Indic 1 passes both (and is not
    # event 1); NUL is refused by PostgreSQL.
    for ref in ("%C2%B2", "%D9%A1", "0" * 5000, "9" * 5000, "msg_%00", "%00", "msg_"):
        response = await admin_gateway.client.get(f"/admin/webhooks/dead/{ref}", headers=ADMIN)
        assert response.status == 404, (ref, await response.text())
        assert response.content_type == "application/problem+json"
        response = await admin_gateway.client.post(
            f"/admin/webhooks/dead/{ref}/replay", headers=ADMIN
        )
        assert response.status == 404, (ref, await response.text())
    for when in OUT_OF_RANGE_TIMES:
        for name in ("since", "until"):
            status, problem = await admin(
                admin_gateway, "GET", "/admin/webhooks/dead", params={name: when}
            )
            assert status == 422 and "out of range" in problem["detail"], (name, when, problem)
        status, problem = await admin(
            admin_gateway, "POST", "/admin/webhooks/dead/replay", json={"since": when}
        )
        assert status == 422 and "out of range" in problem["detail"], (when, problem)


OUT_OF_RANGE_TIMES = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")


# --- the commands -------------------------------------------------------------------------------


async def cutover(config: Path, *args: str) -> tuple[int, str, str]:
    command = shutil.which("cutover", path=str(Path(sys.executable).parent))
    assert command, "the cutover console script is not installed in this venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
    proc = await asyncio.create_subprocess_exec(
        command, "webhooks", *args, "--config", str(config), "--log-level", "WARNING",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_webhooks_commands_list_and_replay_dead_events(
    admin_gateway: GatewayHarness, receiver: Receiver, database_url: str, tmp_path: Path
) -> None:
    gateway = admin_gateway
    config = tmp_path / "cutover.toml"
    config.write_text(tomli_w.dumps(settings_dict(database_url, str(tmp_path / "assets"))))
    code, out, _ = await cutover(config, "list-dead")
    assert (code, out.strip()) == (0, "no dead-lettered webhook events")

    jobs = [await dead_job(gateway, receiver) for _ in range(3)]
    rows = await outbox_rows(gateway.store.engine)
    code, out, _ = await cutover(config, "list-dead")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "ID", "MSG_ID", "PREDICTION", "EVENT", "TRIES", "CODE", "CREATED", "ERROR",
    ]  # fmt: skip
    assert [line.split()[2] for line in lines[1:]] == jobs[::-1]
    assert all("HTTP 500; gave up after 1 attempt" in line for line in lines[1:])

    code, out, _ = await cutover(config, "show", rows[0].msg_id)
    assert code == 0 and f'"prediction_id": "{jobs[0]}"' in out and '"payload"' in out

    code, out, _ = await cutover(config, "replay", str(rows[0].id))
    assert code == 0 and out.startswith(f"replayed event {rows[0].id} ({rows[0].msg_id})")
    code, out, err = await cutover(config, "replay", str(rows[0].id))
    assert code == 1 and "not dead" in err

    since = rows[1].created_at.isoformat()
    code, out, _ = await cutover(config, "replay", "--since", since)
    assert (code, out.strip()) == (0, f"replayed 2 event(s): {rows[1].id} {rows[2].id}")
    await make_due(gateway.store.engine)
    await gateway.settle()
    assert [r.status for r in await outbox_rows(gateway.store.engine)] == ["delivered"] * 3
    assert len({r.webhook_id for r in receiver.received}) == 3

    code, _, err = await cutover(config, "replay")
    assert code == 2 and "an ID or --since" in err
    code, _, err = await cutover(config, "list-dead", "--since", "not-a-time")
    assert code == 1 and "ISO 8601" in err


async def test_webhooks_commands_report_bad_input_in_one_line(
    admin_gateway: GatewayHarness, database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "cutover.toml"
    config.write_text(tomli_w.dumps(settings_dict(database_url, str(tmp_path / "assets"))))
    for args in (
        *(("list-dead", "--since", when) for when in OUT_OF_RANGE_TIMES),
        *(("list-dead", "--until", when) for when in OUT_OF_RANGE_TIMES),
        ("replay", "--since", OUT_OF_RANGE_TIMES[0]),
        ("show", "²"),
        ("replay", "9" * 5000),
    ):
        code, out, err = await cutover(config, *args)
        assert code == 1 and out == "", (args, out, err)
        assert err.startswith("cutover: ") and err.count("\n") == 1, (args, err)
    unreachable = settings_dict(
        "postgresql+asyncpg://postgres@127.0.0.1:1/none", str(tmp_path / "x")
    )
    config.write_text(tomli_w.dumps(unreachable))
    code, _, err = await cutover(config, "list-dead")
    assert code == 1 and err.count("\n") == 1 and "is the database up" in err, err
