"""``cutover routes … --url`` and ``cutover shadow report --url`` against a real gateway
process over HTTPS, with only an admin token in the environment: no database, no config
file (gateway/rollout/remote.py, docs/canary.md "Remote CLI"). Changes are audited with
the token's name; a viewer token, a wrong token, an unknown route, bad input and an
untrusted certificate each exit non-zero and change nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from tests.support.live import live_config
from tests.support.process import GatewayProcess
from tests.support.tls import ServerTLS, make_tls

ADMIN_TOKEN = "adm_remote_alice"  # test values, not credentials
VIEWER_TOKEN = "adm_remote_viewer"
ECHO, SPARE = "acme/echo", "acme/spare"
DEAD = "http://127.0.0.1:1"  # no provider is called: these are admin commands


@dataclass
class Remote:
    url: str
    tls: ServerTLS


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    work = tmp_path_factory.mktemp("remote-cli")
    tls = make_tls(work / "tls")
    config = live_config(database_url=f"sqlite+aiosqlite:///{work / 'gw.db'}", workdir=work,
                         tls=tls, cog_url=DEAD, cog_token=None)
    config["providers"]["cand-cog"] = {"kind": "cog", "base_url": DEAD}
    config["routes"] = [
        {"model": ECHO, "provider": "local-cog", "candidate": "cand-cog"},
        {"model": SPARE, "provider": "local-cog", "candidate": "cand-cog"},
    ]
    config["admin"] = {"tokens": [{"name": "ops-alice", "token": ADMIN_TOKEN},
                                  {"name": "eve", "token": VIEWER_TOKEN, "role": "viewer"}]}
    process = GatewayProcess(config, work, ca_file=tls.ca_file).start()
    try:
        yield Remote(process.url, tls)
    finally:
        process.stop()


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, remote: Remote,
        *argv: str, token: str | None = ADMIN_TOKEN, ca: bool = True) -> tuple[int, str, str]:
    """``cutover ARGV --url … --admin-token-env CUTOVER_REMOTE_TOKEN [--ca-file …]``, with no
    config anywhere; ``(exit status, stdout, stderr)``."""
    monkeypatch.delenv("CUTOVER_CONFIG", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    if token is None:
        monkeypatch.delenv("CUTOVER_REMOTE_TOKEN", raising=False)
    else:
        monkeypatch.setenv("CUTOVER_REMOTE_TOKEN", token)
    extra = ["--url", remote.url, "--admin-token-env", "CUTOVER_REMOTE_TOKEN"]
    if ca:
        extra += ["--ca-file", str(remote.tls.ca_file)]
    status = cli.main([*argv, *extra])
    out, err = capsys.readouterr()
    return status, out, err


def spec(capsys: Any, monkeypatch: Any, remote: Remote, route: str) -> dict[str, Any]:
    status, out, err = run(capsys, monkeypatch, remote, "routes", "show", route, "--json")
    assert status == 0, err
    shown: dict[str, Any] = json.loads(out)
    return shown


def test_list_and_show_need_only_the_url_and_a_token(capsys, monkeypatch, remote, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./cutover.db is made or read
    status, out, err = run(capsys, monkeypatch, remote, "routes", "list")
    assert status == 0, err
    assert ECHO in out and "cand-cog" in out
    status, out, err = run(capsys, monkeypatch, remote, "routes", "show", ECHO)
    assert status == 0, err
    assert out.startswith(f"route       {ECHO}") and "changes (newest first):" in out
    assert list(tmp_path.iterdir()) == []


def test_a_canary_change_is_made_and_audited_with_the_tokens_name(capsys, monkeypatch, remote):
    before = spec(capsys, monkeypatch, remote, ECHO)["spec"]["canary_percent"]
    target = "20" if before != 20 else "30"
    status, out, err = run(capsys, monkeypatch, remote, "routes", "set-canary", ECHO, target,
                           "--reason", "remote step")
    assert status == 0, err
    assert f"{ECHO}: canary_percent" in out and "by ops-alice: remote step" in out
    shown = spec(capsys, monkeypatch, remote, ECHO)
    assert shown["spec"]["canary_percent"] == float(target)
    assert (shown["changes"][0]["who"], shown["changes"][0]["reason"]) == ("ops-alice",
                                                                          "remote step")


def test_change_sets_guard_thresholds_and_shadow_policy_fields(capsys, monkeypatch, remote):
    guard = {"max_error_rate": 0.07, "min_samples": 9, "window_s": 120}
    status, _out, err = run(capsys, monkeypatch, remote, "routes", "change", ECHO,
                           "--set", f"guard={json.dumps(guard)}", "--set", "shadow_percent=5",
                           "--set", 'shadow_policy={"allow_fields": ["prompt"]}',
                           "--reason", "tighter guard")
    assert status == 0, err
    shown = spec(capsys, monkeypatch, remote, ECHO)["spec"]
    assert shown["guard"]["max_error_rate"] == 0.07 and shown["guard"]["min_samples"] == 9
    assert shown["shadow_percent"] == 5.0


def test_pause_and_resume_the_guard(capsys, monkeypatch, remote):
    if spec(capsys, monkeypatch, remote, SPARE)["spec"]["guard"] is None:
        guard = json.dumps({"max_error_rate": 0.5, "min_samples": 5, "window_s": 60})
        assert run(capsys, monkeypatch, remote, "routes", "change", SPARE, "--set",
                   f"guard={guard}", "--reason", "a guard")[0] == 0
    for action, paused in (("pause-guard", True), ("resume-guard", False)):
        status, _, err = run(capsys, monkeypatch, remote, "routes", action, SPARE,
                             "--reason", "maintenance")
        assert status == 0, err
        assert spec(capsys, monkeypatch, remote, SPARE)["spec"].get("guard_paused", False) is paused


def test_promote_and_rollback_remotely(capsys, monkeypatch, remote):
    status, _, err = run(capsys, monkeypatch, remote, "routes", "rollback", SPARE,
                         "--reason", "back")
    assert status == 0, err
    assert spec(capsys, monkeypatch, remote, SPARE)["spec"]["canary_percent"] == 0
    if spec(capsys, monkeypatch, remote, SPARE)["spec"]["candidate"] is None:
        pytest.skip("promoted already")  # cannot happen: the module promotes once
    status, _out, err = run(capsys, monkeypatch, remote, "routes", "promote", SPARE,
                           "--reason", "done")
    assert status == 0, err
    promoted = spec(capsys, monkeypatch, remote, SPARE)["spec"]
    assert (promoted["provider"], promoted["candidate"]) == ("cand-cog", None)
    status, _, err = run(capsys, monkeypatch, remote, "routes", "promote", SPARE,
                         "--reason", "again")
    assert status == 1 and "candidate" in err  # nothing to promote: the API's 409, one line


def test_the_shadow_report_comes_through_the_admin_api(capsys, monkeypatch, remote, tmp_path):
    status, out, err = run(capsys, monkeypatch, remote, "shadow", "report", "--route", ECHO,
                           "--format", "json")
    assert status == 0, err
    assert json.loads(out)["route"] == ECHO
    page = tmp_path / "report.html"
    status, out, err = run(capsys, monkeypatch, remote, "shadow", "report", "--route", ECHO,
                           "--format", "html", "--output", str(page))
    assert status == 0 and page.read_text().lower().startswith("<!doctype html>"), err
    status, _, err = run(capsys, monkeypatch, remote, "shadow", "report", "--route", ECHO,
                         "--since", "2999-01-01T00:00:00Z")
    assert status == 1 and "in the future" in err


@pytest.mark.parametrize(
    ("argv", "token", "ca", "status", "says"),
    [
        (("routes", "set-canary", ECHO, "90", "--reason", "r"), VIEWER_TOKEN, True, 1,
         "viewer"),
        (("routes", "set-canary", ECHO, "90", "--reason", "r"), "adm_wrong", True, 1, "401"),
        (("routes", "set-canary", ECHO, "150", "--reason", "r"), ADMIN_TOKEN, True, 1, "100"),
        (("routes", "set-canary", "acme/none", "90", "--reason", "r"), ADMIN_TOKEN, True, 1,
         "does not exist"),
        (("routes", "change", ECHO, "--set", "nonsense=1", "--reason", "r"), ADMIN_TOKEN,
         True, 1, "nonsense"),
        (("routes", "change", ECHO, "--set", "no-equals-sign", "--reason", "r"),
         ADMIN_TOKEN, True, 1, "FIELD=VALUE"),
        (("routes", "set-canary", ECHO, "90", "--reason", "r"), ADMIN_TOKEN, False, 1,
         "certificate"),
        (("routes", "set-canary", ECHO, "90", "--reason", "r"), None, True, 2,
         "CUTOVER_REMOTE_TOKEN"),
    ],
    ids=["viewer", "wrong-token", "bad-percent", "unknown-route", "unknown-field",
         "bad-set", "untrusted-certificate", "no-token"],
)
def test_refusals_exit_non_zero_in_one_line_and_change_nothing(
    capsys, monkeypatch, remote, argv, token, ca, status, says
):
    before = spec(capsys, monkeypatch, remote, ECHO)
    got, out, err = run(capsys, monkeypatch, remote, *argv, token=token, ca=ca)
    assert got == status, (out, err)
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    after = spec(capsys, monkeypatch, remote, ECHO)
    assert after["spec"] == before["spec"] and after["changes"] == before["changes"]


def test_remote_options_without_url_are_a_usage_error(capsys, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("CUTOVER_REMOTE_TOKEN", ADMIN_TOKEN)
    with pytest.raises(SystemExit) as exited:
        cli.main(["routes", "list", "--admin-token-env", "CUTOVER_REMOTE_TOKEN"])
    assert exited.value.code == 2
    assert "go with --url" in capsys.readouterr().err
