"""The canary in one gateway process: sticky arms, admin changes, the guard, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from contracts.job import JobState
from gateway import cli
from gateway.app import LOOPS
from gateway.http import keys
from gateway.rollout.guardloop import Guard
from tests.support.gateway import VERSION, GatewayHarness, settings_dict

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_canary_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GUARD = {"max_error_rate": 0.3, "min_samples": 5, "window_s": 60}


def _sections(**route: Any) -> dict[str, Any]:
    return {
        "providers": {"fake": {"kind": "fake"}, "fake2": {"kind": "fake"}},
        "routes": [
            {"model": "acme/echo", "version": VERSION, "provider": "fake",
             "candidate": "fake2", **route},
            {"model": "acme/plain", "provider": "fake"},
        ],
        "admin": {"tokens": [{"name": "ops-bob", "token": ADMIN_TOKEN}]},
    }


@pytest.fixture
async def canary(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(**_sections(guard=GUARD))


async def _admin(gateway: GatewayHarness, method: str, path: str, **kwargs: Any):
    response = await gateway.client.request(method, f"/admin{path}", headers=ADMIN, **kwargs)
    return response.status, await response.json()


async def _owner(gateway: GatewayHarness, prediction_id: str) -> dict[str, Any]:
    status, body = await _admin(gateway, "GET", f"/predictions/{prediction_id}")
    assert status == 200, body
    return body


async def _create(gateway: GatewayHarness, **headers: str) -> dict[str, Any]:
    return await gateway.create({"version": VERSION, "input": {"prompt": "x"}}, **headers)


async def test_callers_stay_on_their_arm_and_raising_the_percent_moves_none_back(canary):
    status, _ = await _admin(canary, "PATCH", f"/routes/{ROUTE}",
                             json={"caller_key": "header:X-Caller", "reason": "per user"})
    assert status == 200
    await _admin(canary, "POST", f"/routes/{ROUTE}/canary", json={"percent": 50, "reason": "a"})
    callers = [f"user-{i}" for i in range(200)]
    arms = {}
    for caller in callers:
        made = await _create(canary, **{"X-Caller": caller})
        arms[caller] = (await _owner(canary, made["id"]))["arm"]
    assert 0.38 <= sum(a == "candidate" for a in arms.values()) / len(callers) <= 0.62
    for caller in callers[:20]:  # the same caller, the same arm
        made = await _create(canary, **{"X-Caller": caller})
        assert (await _owner(canary, made["id"]))["arm"] == arms[caller]
    await _admin(canary, "POST", f"/routes/{ROUTE}/canary", json={"percent": 60, "reason": "b"})
    for caller in [c for c in callers if arms[c] == "candidate"][:40]:
        made = await _create(canary, **{"X-Caller": caller})
        assert (await _owner(canary, made["id"]))["arm"] == "candidate"


async def test_admin_changes_are_live_audited_and_hidden_from_apps(canary):
    first = await _create(canary)
    status, entry = await _admin(canary, "POST", f"/routes/{ROUTE}/canary",
                                 json={"percent": 100, "reason": "go"})
    assert status == 200 and entry["who"] == "ops-bob"
    second = await _create(canary)
    assert (await _owner(canary, first["id"]))["provider"] == "fake"
    owner = await _owner(canary, second["id"])
    assert (owner["provider"], owner["arm"]) == ("fake2", "candidate")
    assert not {"provider", "arm", "route"} & set(await canary.get(second["id"]))
    await _admin(canary, "POST", f"/routes/{ROUTE}/rollback", json={"reason": "stop"})
    # a rollback does not move a prediction: its cancel still goes to its provider
    await canary.settle()
    await canary.client.post(f"/v1/predictions/{second['id']}/cancel", headers=canary.headers)
    await canary.settle()
    cancels = canary.app[keys.PROVIDERS]["fake2"].adapter.cancel_calls  # type: ignore[attr-defined]
    assert cancels == [f"fake-{second['id']}"]
    status, changes = await _admin(canary, "GET", f"/routes/{ROUTE}/changes")
    assert [(c["who"], c["action"], c["reason"]) for c in changes["results"][:2]] == [
        ("ops-bob", "rollback", "stop"),
        ("ops-bob", "set-canary", "go"),
    ]
    status, everything = await _admin(canary, "GET", "/route-changes")
    assert status == 200 and len(everything["results"]) >= 4  # two seeds, two changes


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/routes/acme/nope/canary", {"percent": 5, "reason": "r"}, 404),
        (f"/routes/{ROUTE}/canary", {"percent": 101, "reason": "r"}, 422),
        (f"/routes/{ROUTE}/canary", {"percent": -1, "reason": "r"}, 422),
        (f"/routes/{ROUTE}/canary", {"percent": "lots", "reason": "r"}, 422),
        (f"/routes/{ROUTE}/canary", {"percent": 5}, 422),
        (f"/routes/{ROUTE}/canary", {"reason": "r"}, 422),
        (f"/routes/{ROUTE}/canary", [1, 2], 422),
        (f"/routes/{ROUTE}/shadow", {"percent": 200, "reason": "r"}, 422),
        (f"/routes/{ROUTE}/shadow", {"percent": 10, "reason": "no shadow_policy"}, 422),
        ("/routes/acme/plain/canary", {"percent": 5, "reason": "no candidate"}, 422),
        # a misspelt field beside the right ones was ignored (200, the change made)
        (f"/routes/{ROUTE}/canary", {"percent": 5, "reason": "r", "percnet": 50}, 422),
        (f"/routes/{ROUTE}/rollback", {"reason": "r", "percent": 50}, 422),
    ],
)
async def test_bad_admin_input_is_4xx_and_changes_nothing(canary, path, body, status):
    before = await _admin(canary, "GET", "/route-changes")
    got, problem = await _admin(canary, "POST", path, json=body)
    assert got == status, problem
    assert problem["detail"]
    assert await _admin(canary, "GET", "/route-changes") == before


@pytest.mark.parametrize(
    "patch",
    [
        {"guard": {"max_error_rate": 1.5}, "reason": "r"},
        {"guard": {"min_samples": 10}, "reason": "r"},
        {"guard": {"max_error_rate": 0.1, "window_s": -5}, "reason": "r"},
        {"caller_key": "cookie:x", "reason": "r"},
        {"candidate": "nowhere", "reason": "r"},
        {"shadow_policy": {"max_input_bytes": 0}, "reason": "r"},
        {"reason": "r"},
    ],
)
async def test_malformed_thresholds_and_policies_are_422(canary, patch):
    before = await _admin(canary, "GET", f"/routes/{ROUTE}")
    got, problem = await _admin(canary, "PATCH", f"/routes/{ROUTE}", json=patch)
    assert got == 422, problem
    assert await _admin(canary, "GET", f"/routes/{ROUTE}") == before


async def test_a_failure_burst_on_the_candidate_rolls_the_canary_back(canary):
    await _admin(canary, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    made = [await _create(canary) for _ in range(6)]
    await canary.settle()
    for prediction in made:
        assert await canary.deliver(prediction["id"], JobState.FAILED, error="boom") == 200
    await canary.settle()  # a round of every loop, the guard's included
    guard = next(loop for loop in canary.app[LOOPS] if isinstance(loop, Guard))
    assert await guard.run_once() == 0  # already at 0: one rollback only
    _, shown = await _admin(canary, "GET", f"/routes/{ROUTE}")
    assert shown["spec"]["canary_percent"] == 0
    last = shown["changes"][0]
    assert (last["who"], last["action"]) == ("guard", "rollback")
    assert last["reason"] == "candidate error rate 100.0% > 30.0% (6 of 6)"  # who says guard
    assert last["evidence"]["candidate"]["failed"] == 6
    metrics = (await (await canary.client.get("/metrics")).text())
    assert f'cutover_guard_rollbacks_total{{route="{ROUTE}"}} 1.0' in metrics  # one label
    assert 'arm="candidate"' in metrics
    after = await _create(canary)
    assert (await _owner(canary, after["id"]))["provider"] == "fake"


def _write_config(tmp_path: Path, database_url: str, **route: Any) -> Path:
    data = settings_dict(database_url, str(tmp_path / "assets"), **_sections(**route))
    path = tmp_path / "cutover.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    return path


async def test_cli_changes_and_shows_routes(database_url, tmp_path, capsys, monkeypatch):
    config = str(_write_config(tmp_path, database_url,
                               shadow_policy={"allow_fields": ["prompt"]}))
    run = lambda *args: cli.main(["routes", *args, "--config", config])  # noqa: E731
    with monkeypatch.context():
        assert await _in_thread(run, "set-canary", ROUTE, "25", "--reason", "step one") == 0
        assert "canary_percent 0.0 -> 25.0" in capsys.readouterr().out
        assert await _in_thread(run, "set-canary", ROUTE, "101", "--reason", "x") != 0
        assert "0 to 100" in capsys.readouterr().err
        assert await _in_thread(run, "set-canary", "acme/nope", "5", "--reason", "x") != 0
        assert "acme/nope" in capsys.readouterr().err
        assert await _in_thread(run, "set-shadow", ROUTE, "10", "--reason", "look") == 0
        assert await _in_thread(run, "rollback", ROUTE, "--reason", "enough") == 0
        capsys.readouterr()
        assert await _in_thread(run, "list") == 0
        assert ROUTE in capsys.readouterr().out
        assert await _in_thread(run, "show", ROUTE) == 0
        shown = capsys.readouterr().out
    report = lambda *args: cli.main(["shadow", "report", *args, "--config", config])  # noqa: E731
    out = tmp_path / "report.html"
    assert await _in_thread(report, "--route", ROUTE, "--format", "html",
                            "--output", str(out)) == 0
    assert "<svg" in out.read_text() or "<html" in out.read_text()
    assert await _in_thread(report, "--route", "acme/nope") == 1
    assert "acme/nope" in capsys.readouterr().err
    assert await _in_thread(report, "--route", ROUTE, "--since", "soon") == 1
    assert "--since" in capsys.readouterr().err
    assert "cli set-canary" in shown and "step one" in shown
    assert "cli rollback" in shown and "enough" in shown and "cli set-shadow" in shown
    assert "canary      0%" in shown


async def _in_thread(function: Any, *args: str) -> int:
    import asyncio

    return int(await asyncio.to_thread(function, *args))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", f"/routes/{ROUTE}/canary", {"percent": 5}),
        ("POST", f"/routes/{ROUTE}/rollback", {}),
        ("PATCH", f"/routes/{ROUTE}", {"caller_key": "header:X-Caller"}),
    ],
)
async def test_a_reason_over_1000_characters_is_422_naming_it(canary, method, path, body):
    """A 100 KB reason was stored in the audit and printed by every listing of it
    (docs/canary.md 'Changing a route')."""
    before = await _admin(canary, "GET", "/route-changes")
    got, problem = await _admin(canary, method, path, json={**body, "reason": "x" * 100_000})
    assert got == 422, problem
    assert "reason" in problem["detail"] and "1000" in problem["detail"]
    assert await _admin(canary, "GET", "/route-changes") == before
    got, changed = await _admin(canary, method, path, json={**body, "reason": "y" * 1000})
    assert got == 200, changed
    assert changed["reason"] == "y" * 1000
