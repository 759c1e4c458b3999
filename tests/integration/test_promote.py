"""Promote, the guard's pause, admin token roles, and ``cutover check``'s drift report
(docs/canary.md "Promote", "Drift"; docs/console.md "Roles")."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from contracts.job import JobState
from gateway import cli
from gateway.app import LOOPS
from gateway.rollout.guardloop import Guard
from tests.support.gateway import VERSION, GatewayHarness, settings_dict

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_promote_test"  # test values, not credentials
VIEWER_TOKEN = "adm_promote_viewer"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
VIEWER = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
GUARD = {"max_error_rate": 0.3, "min_samples": 5, "window_s": 60}


def _sections(**route: Any) -> dict[str, Any]:
    return {
        "providers": {"fake": {"kind": "fake"}, "fake2": {"kind": "fake"}},
        "routes": [
            {"model": "acme/echo", "version": VERSION, "provider": "fake", "target": "old-name",
             "candidate": "fake2", "candidate_target": "new-name", "guard": GUARD, **route},
            {"model": "acme/plain", "provider": "fake"},
        ],
        "admin": {"tokens": [{"name": "ops-bob", "token": ADMIN_TOKEN},
                             {"name": "eve", "token": VIEWER_TOKEN, "role": "viewer"}]},
    }


@pytest.fixture
async def gw(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(**_sections())


async def _admin(gateway: GatewayHarness, method: str, path: str, headers: Any = None,
                 **kwargs: Any) -> tuple[int, Any]:
    response = await gateway.client.request(method, f"/admin{path}", headers=headers or ADMIN,
                                            **kwargs)
    return response.status, await response.json()


async def _served_by(gateway: GatewayHarness) -> tuple[str, str | None]:
    made = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    job = await gateway.store.get(made["id"])
    return job.provider, job.target


async def test_promote_makes_the_candidate_the_control_and_keeps_the_history(gw):
    await _admin(gw, "POST", f"/routes/{ROUTE}/canary", json={"percent": 50, "reason": "half"})
    status, entry = await _admin(gw, "POST", f"/routes/{ROUTE}/promote",
                                 json={"reason": "the candidate is better"})
    assert status == 200, entry
    assert (entry["who"], entry["action"]) == ("ops-bob", "promote")
    assert entry["before"]["provider"] == "fake" and entry["before"]["candidate"] == "fake2"
    _, shown = await _admin(gw, "GET", f"/routes/{ROUTE}")
    spec = shown["spec"]
    assert (spec["provider"], spec["candidate"]) == ("fake2", None)
    assert (spec["canary_percent"], spec["shadow_percent"]) == (0, 0)
    assert [c["action"] for c in shown["changes"][:3]] == ["promote", "set-canary", "seed"]
    for _ in range(5):  # every new prediction on the promoted provider, under its own name
        assert await _served_by(gw) == ("fake2", "new-name")


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/routes/acme/plain/promote", {"reason": "r"}, 409),  # no candidate
        ("/routes/acme/nope/promote", {"reason": "r"}, 404),
        (f"/routes/{ROUTE}/promote", {}, 422),
        (f"/routes/{ROUTE}/promote", {"reason": "  "}, 422),
        (f"/routes/{ROUTE}/promote", {"reason": "x" * 1001}, 422),
        (f"/routes/{ROUTE}/promote", {"reason": "r", "candidate": "fake"}, 422),
        (f"/routes/{ROUTE}/resume-guard", {"reason": "not paused"}, 409),
        ("/routes/acme/plain/pause-guard", {"reason": "no guard"}, 409),
        (f"/routes/{ROUTE}/pause-guard", {"reason": "r", "for_s": 60}, 422),
    ],
)
async def test_bad_promote_and_guard_input_is_4xx_and_changes_nothing(gw, path, body, status):
    before = await _admin(gw, "GET", "/route-changes")
    got, problem = await _admin(gw, "POST", path, json=body)
    assert got == status, problem
    assert problem["detail"]
    assert await _admin(gw, "GET", "/route-changes") == before


async def test_a_viewer_token_reads_and_changes_nothing(gw):
    status, listing = await _admin(gw, "GET", "/routes", VIEWER)
    assert status == 200 and listing["results"]
    before = await _admin(gw, "GET", "/route-changes")
    for path, body in ((f"/routes/{ROUTE}/canary", {"percent": 10, "reason": "r"}),
                       (f"/routes/{ROUTE}/promote", {"reason": "r"}),
                       (f"/routes/{ROUTE}/pause-guard", {"reason": "r"})):
        got, problem = await _admin(gw, "POST", path, VIEWER, json=body)
        assert got == 403, problem
        assert "viewer" in problem["detail"]
    got, _ = await _admin(gw, "PATCH", f"/routes/{ROUTE}", VIEWER,
                          json={"caller_key": "header:X", "reason": "r"})
    assert got == 403
    assert await _admin(gw, "GET", "/route-changes") == before


async def test_a_paused_guard_counts_but_does_not_roll_back_until_resumed(gw):
    await _admin(gw, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    status, entry = await _admin(gw, "POST", f"/routes/{ROUTE}/pause-guard",
                                 json={"reason": "known flaky hour"})
    assert status == 200 and entry["after"]["guard_paused"] is True
    made = [await gw.create({"version": VERSION, "input": {"prompt": "x"}}) for _ in range(6)]
    await gw.settle()
    for prediction in made:
        assert await gw.deliver(prediction["id"], JobState.FAILED, error="boom") == 200
    await gw.settle()
    guard = next(loop for loop in gw.app[LOOPS] if isinstance(loop, Guard))
    assert await guard.run_once() == 0
    _, shown = await _admin(gw, "GET", f"/routes/{ROUTE}")
    assert shown["spec"]["canary_percent"] == 100 and shown["spec"]["guard_paused"]
    assert shown["arms"]["candidate"]["failed"] == 6  # counted all the same
    status, _ = await _admin(gw, "POST", f"/routes/{ROUTE}/resume-guard", json={"reason": "over"})
    assert status == 200
    # the count restarts at the route's last change: six more failures roll it back
    made = [await gw.create({"version": VERSION, "input": {"prompt": "x"}}) for _ in range(6)]
    await gw.settle()
    for prediction in made:
        await gw.deliver(prediction["id"], JobState.FAILED, error="boom")
    await gw.settle()
    _, shown = await _admin(gw, "GET", f"/routes/{ROUTE}")
    assert shown["spec"]["canary_percent"] == 0
    assert (shown["changes"][0]["who"], shown["changes"][0]["action"]) == ("guard", "rollback")


def _write_config(tmp_path: Path, database_url: str, sections: dict[str, Any]) -> Path:
    data = settings_dict(database_url, str(tmp_path / "assets"), **sections)
    path = tmp_path / "cutover.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    return path


async def _cli(*argv: str) -> int:
    return int(await asyncio.to_thread(cli.main, list(argv)))


async def test_cli_promote_and_check_prints_the_toml_that_matches_the_store(
    database_url, tmp_path, capsys
):
    sections = _sections()
    config = str(_write_config(tmp_path, database_url, sections))
    assert await _cli("routes", "set-canary", ROUTE, "100", "--reason", "all in",
                      "--config", config) == 0
    assert await _cli("routes", "promote", ROUTE, "--reason", "done", "--config", config) == 0
    assert "provider fake -> fake2" in capsys.readouterr().out
    assert await _cli("routes", "promote", ROUTE, "--reason", "again", "--config", config) == 1
    assert "no candidate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        await _cli("routes", "pause-guard", ROUTE, "--reason", "", "--config", config)
    assert usage.value.code == 2
    capsys.readouterr()
    assert await _cli("routes", "pause-guard", ROUTE, "--reason", "watch", "--config",
                      config) == 0
    capsys.readouterr()

    assert await _cli("check", "--config", config) == 0
    out = capsys.readouterr().out
    assert f"drift       {ROUTE}: the store differs from the file in" in out
    assert "in candidate, guard_paused, provider;" in out
    assert "promote by cli" not in out  # the last change is the pause
    assert "its guard is paused live" in out
    assert "acme/plain" not in out.split("drift", 1)[1]  # unchanged: not reported
    toml = out.split("replace these [[routes]] entries with:\n", 1)[1]
    entry = tomllib.loads(toml)["routes"][0]
    assert (entry["provider"], entry["target"]) == ("fake2", "new-name")
    assert not {"candidate", "candidate_target", "canary_percent"} & set(entry)
    assert entry["guard"] == GUARD

    # the printed entry, put in the file, matches the store: only the pause is left
    sections["routes"][0] = entry
    config = str(_write_config(tmp_path, database_url, sections))
    assert await _cli("routes", "resume-guard", ROUTE, "--reason", "ok", "--config",
                      config) == 0
    capsys.readouterr()
    assert await _cli("check", "--config", config) == 0
    assert "drift       none" in capsys.readouterr().out


async def test_check_reports_no_drift_for_a_store_never_created(tmp_path, capsys):
    url = f"sqlite+aiosqlite:///{tmp_path / 'never' / 'cutover.db'}"
    config = str(_write_config(tmp_path, url, _sections()))
    assert await _cli("check", "--config", config) == 0
    assert "drift       not checked: the store" in capsys.readouterr().out
    assert not (tmp_path / "never").exists()  # check created nothing
