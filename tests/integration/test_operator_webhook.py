"""The operator webhook (docs/webhooks.md, "Operator webhook"): each live route change
enqueues one signed event in its own transaction, delivered through the outbox with
retries and a dead letter, once whichever process made the change.

The receiver is a real HTTP server on 127.0.0.1 (tests/support/receiver.py); each event's
signature is checked here with ``hmac`` from the secret, as the Standard Webhooks spec
says, not with the gateway's signer.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
from typing import Any

import pytest
import tomli_w

from contracts.job import JobState
from gateway import cli
from gateway.app import _ENGINE
from gateway.webhooks.signing import generate_secret
from tests.support.gateway import VERSION, GatewayHarness, settings_dict
from tests.support.outbox import outbox_rows
from tests.support.receiver import Received, Receiver, Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the outbox's SQL is the point (docs/testing.md)

ROUTE = f"acme/echo:{VERSION}"
ADMIN = {"Authorization": "Bearer adm_operator_hook"}  # a test value, not a credential
SECRET_ENV = "CUTOVER_TEST_OPERATOR_SECRET"
GUARD = {"max_error_rate": 0.3, "min_samples": 5, "window_s": 60}


def _sections(url: str | None, **hook: Any) -> dict[str, Any]:
    sections: dict[str, Any] = {
        "providers": {"fake": {"kind": "fake"}, "fake2": {"kind": "fake"}},
        "routes": [{"model": "acme/echo", "version": VERSION, "provider": "fake",
                    "candidate": "fake2", "guard": GUARD}],
        "admin": {"tokens": [{"name": "ops-ann", "token": "adm_operator_hook"}]},
        "webhooks": {"allow_hosts": ["127.0.0.1"], "retry_delays_s": [0.0, 0.0],
                     "retry_jitter_ratio": 0.0},
    }
    if url is not None:
        sections["operator_webhook"] = {"url": url, "secret_env": SECRET_ENV, **hook}
    return sections


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = generate_secret()
    monkeypatch.setenv(SECRET_ENV, value)
    return value


def verified(received: Received, secret: str) -> dict[str, Any]:
    """The event's body once its Standard Webhooks signature checks out (HMAC-SHA256 of
    ``id.timestamp.body`` keyed with the base64-decoded part of the ``whsec_`` secret)."""
    msg_id = received.headers["webhook-id"]
    stamp = received.headers["webhook-timestamp"]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{stamp}.".encode() + received.body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [part.split(",", 1)[1] for part in received.headers["webhook-signature"].split()]
    assert any(hmac.compare_digest(expected, sig) for sig in offered), received.headers
    assert received.headers["content-type"] == "application/json"
    event: dict[str, Any] = json.loads(received.body)
    return event


async def _admin(gw: GatewayHarness, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await gw.client.post(f"/admin/routes/{ROUTE}{path}", json=body, headers=ADMIN)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def _events(gw: GatewayHarness, receiver: Receiver, count: int) -> list[Received]:
    """Settle the gateway until ``count`` events were accepted (a deadline, no sleep)."""

    async def arrived() -> bool:
        await gw.settle()
        return len(receiver.accepted) >= count

    await wait_until(arrived, 10.0, what=f"{count} operator events accepted")
    return receiver.accepted


async def _rows(gw: GatewayHarness) -> list[Any]:
    """The outbox rows of operator events (no prediction's)."""
    return [r for r in await outbox_rows(gw.app[_ENGINE]) if r.job_id is None]


async def test_a_canary_change_a_guard_rollback_and_a_promote_each_arrive_once_signed(
    make_gateway: Any, secret: str,
) -> None:
    async with Receiver() as receiver:
        gw = await make_gateway(**_sections(receiver.url("/ops")))
        canary = await _admin(gw, "/canary", {"percent": 100, "reason": "all in"})
        made = [await gw.create({"version": VERSION, "input": {"prompt": "x"}}) for _ in range(6)]
        await gw.settle()
        for prediction in made:  # the candidate fails them all: the guard rolls back
            assert await gw.deliver(prediction["id"], JobState.FAILED, error="boom") == 200
        await _events(gw, receiver, 2)
        promoted = await _admin(gw, "/promote", {"reason": "the candidate is fixed"})
        events = [verified(r, secret) for r in await _events(gw, receiver, 3)]
        await gw.settle()
    assert len(receiver.received) == 3  # each once: no retry, no duplicate
    assert len({r.webhook_id for r in receiver.received}) == 3
    assert [e["type"] for e in events] == [
        "route.canary_changed", "route.rolled_back", "route.promoted"]
    first, rollback, promote = (e["data"] for e in events)
    assert (first["audit_id"], first["actor"], first["reason"]) == (canary["id"], "ops-ann",
                                                                   "all in")
    assert (first["before"]["canary_percent"], first["after"]["canary_percent"]) == (0, 100)
    assert first["changed"] == ["canary_percent"] and first["route"] == ROUTE
    assert rollback["actor"] == "guard" and rollback["action"] == "rollback"
    assert rollback["evidence"]["reason_class"] == "errors"
    assert rollback["evidence"]["candidate"]["failed"] == 6
    assert "rescued" in rollback["evidence"]  # the rescue's summary (nothing to move here)
    assert promote["audit_id"] == promoted["id"]
    assert (promote["after"]["provider"], promote["after"]["candidate"]) == ("fake2", None)
    assert all(e["timestamp"] for e in events)


async def test_a_500_is_retried_and_then_delivered(make_gateway: Any, secret: str) -> None:
    async with Receiver() as receiver:
        receiver.reply(Reply(500))
        gw = await make_gateway(**_sections(receiver.url()))
        await _admin(gw, "/pause-guard", {"reason": "a noisy hour"})
        await _events(gw, receiver, 1)
    first, second = receiver.received
    assert first.webhook_id == second.webhook_id  # the same event, retried
    assert verified(second, secret)["type"] == "route.guard_paused"
    rows = await _rows(gw)
    assert [(r.status, r.attempts, r.last_status_code) for r in rows] == [("delivered", 2, 200)]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: nothing listens there


async def test_a_receiver_down_for_good_ends_in_a_dead_letter_and_the_change_stands(
    make_gateway: Any, secret: str,
) -> None:
    gw = await make_gateway(**_sections(f"http://127.0.0.1:{_closed_port()}/ops"))
    entry = await _admin(gw, "/rollback", {"reason": "by hand"})

    async def dead() -> bool:
        await gw.settle()
        return [r.status for r in await _rows(gw)] == ["dead"]

    await wait_until(dead, 10.0, what="the operator event dead-lettered")
    response = await gw.client.get("/admin/webhooks/dead", headers=ADMIN)
    letters = (await response.json())["results"]
    assert [(x["event"], x["prediction_id"], x["attempts"]) for x in letters] == [
        ("operator", None, 3)]
    assert json.loads((await _rows(gw))[0].payload)["data"]["audit_id"] == entry["id"]
    shown_letter = await gw.client.get(f"/admin/webhooks/dead/{letters[0]['msg_id']}",
                                       headers=ADMIN)
    assert (await shown_letter.json())["payload"]["type"] == "route.rolled_back"
    replayed = await gw.client.post(f"/admin/webhooks/dead/{letters[0]['id']}/replay",
                                    headers=ADMIN)
    assert replayed.status == 200, await replayed.text()
    assert [(r.status, r.attempts) for r in await _rows(gw)] == [("pending", 0)]
    shown = await (await gw.client.get(f"/admin/routes/{ROUTE}", headers=ADMIN)).json()
    assert shown["changes"][0]["action"] == "rollback"  # the change stands


async def test_two_gateway_processes_send_one_event_per_change(
    make_gateway: Any, secret: str,
) -> None:
    async with Receiver() as receiver:
        gw = await make_gateway(**_sections(receiver.url()))
        other = await make_gateway(**_sections(receiver.url()))
        await _admin(gw, "/canary", {"percent": 10, "reason": "a tenth"})
        await _admin(other, "/canary", {"percent": 50, "reason": "half"})
        for _ in range(3):  # both deliverers claim from the one outbox
            await other.settle()
            await gw.settle()
        await _events(gw, receiver, 2)
    events = [verified(r, secret) for r in receiver.received]
    assert sorted(e["data"]["after"]["canary_percent"] for e in events) == [10, 50]
    assert len(receiver.received) == 2


async def test_the_events_filter_and_no_operator_webhook_enqueue_nothing_else(
    make_gateway: Any, secret: str,
) -> None:
    filtered = await make_gateway(**_sections("http://127.0.0.1:9/ops",
                                              events=["route.rolled_back"]))
    await _admin(filtered, "/canary", {"percent": 10, "reason": "not announced"})
    assert await _rows(filtered) == []
    await _admin(filtered, "/rollback", {"reason": "announced"})
    assert [json.loads(r.payload)["type"] for r in await _rows(filtered)] == [
        "route.rolled_back"]


async def test_without_an_operator_webhook_nothing_is_enqueued(make_gateway: Any) -> None:
    gw = await make_gateway(**_sections(None))
    await _admin(gw, "/canary", {"percent": 10, "reason": "quiet"})
    await _admin(gw, "/rollback", {"reason": "quiet"})
    assert await _rows(gw) == []


async def test_a_cli_change_on_the_database_is_sent_by_the_gateway_without_its_secret(
    make_gateway: Any, secret: str, database_url: str, tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cutover routes`` only enqueues: it needs the URL, not the secret; a gateway sends."""
    async with Receiver() as receiver:
        sections = _sections(receiver.url())
        gw = await make_gateway(**sections)  # its signer is built: the secret was read
        config = tmp_path / "cutover.toml"
        config.write_bytes(tomli_w.dumps(
            settings_dict(database_url, str(tmp_path / "assets"), **sections)).encode())
        monkeypatch.delenv(SECRET_ENV)
        argv = ["routes", "set-canary", ROUTE, "30", "--reason", "from a shell",
                "--config", str(config)]
        assert await asyncio.to_thread(cli.main, argv) == 0
        (received,) = await _events(gw, receiver, 1)
    event = verified(received, secret)
    assert (event["type"], event["data"]["actor"]) == ("route.canary_changed", "cli")
