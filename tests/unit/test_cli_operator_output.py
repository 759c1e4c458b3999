"""What an operator reads from ``cutover check``, ``serve`` and ``routes show``.

``cutover check`` on a config whose certificate files were missing said all was well and
``serve`` then stopped with "cannot load the TLS certificate: [Errno 2] No such file or
directory", naming no file; ``routes show`` printed its per-arm numbers unaligned with
their headings.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from gateway import cli
from gateway.config import load_settings
from gateway.rollout import cli as routecli

CONFIG = """
[gateway]
listen = "127.0.0.1:0"
api_tokens = ["r8_test"]
database_url = "sqlite+aiosqlite:///{tmp}/cutover.db"
storage_url = "file://{tmp}/assets"
tls_cert_file = "{cert}"
tls_key_file = "{key}"

[providers.local-cog]
kind = "cog"
base_url = "http://127.0.0.1:5000"

[[routes]]
model = "acme/echo"
provider = "local-cog"
"""


def _config(tmp_path: Path, cert: Path, key: Path) -> str:
    path = tmp_path / "cutover.toml"
    path.write_text(CONFIG.format(tmp=tmp_path, cert=cert, key=key))
    return str(path)


def test_check_and_serve_name_a_missing_certificate_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path, tmp_path / "nope/cert.pem", tmp_path / "nope/key.pem")
    assert cli.main(["check", "--config", config]) == 1
    err = capsys.readouterr().err
    assert f"tls_cert_file = {tmp_path}/nope/cert.pem" in err
    assert "No such file or directory" in err and "[Errno" not in err
    assert cli.main(["serve", "--config", config]) == 2
    assert f"tls_cert_file = {tmp_path}/nope/cert.pem" in capsys.readouterr().err


def test_check_accepts_a_loadable_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "both.pem"))
    both = tmp_path / "both.pem"
    assert cli.main(["check", "--config", _config(tmp_path, both, both)]) == 0
    out = capsys.readouterr()
    assert out.err == "" and "(https)" in out.out
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    assert cli.main(["check", "--config", _config(tmp_path, not_pem, not_pem)]) == 1
    assert "cannot load the TLS certificate" in capsys.readouterr().err


def test_routes_show_aligns_the_numbers_of_each_arm_under_their_headings() -> None:
    arm = {"provider": "local-cog", "count": 125, "failed": 1, "error_rate": 0.008,
           "p50_s": 0.078, "p95_s": 0.934, "stuck": 0}
    shown = {
        "route": "acme/echo", "window_s": 300.0, "since": "2026-12-02T07:00:00Z", "changes": [],
        "spec": {"provider": "local-cog", "candidate": "new", "canary_percent": 10.0,
                 "caller_key": "token", "shadow_percent": 0.0, "guard": None},
        "arms": {"control": arm, "candidate": {**arm, "provider": "new", "count": 3,
                                               "failed": 0, "stuck": 2, "error_rate": 0.4,
                                               "p50_s": None, "p95_s": None}},
    }
    lines = routecli._show(shown).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("since 2026-12-02T07:00"))
    table = lines[head:head + 3]
    for heading, cell in (("ARM", "control"), ("PROVIDER", "local-cog"), ("COUNT", "125"),
                          ("STUCK", "0"), ("ERROR", "0.8%"), ("P95", "934 ms")):
        assert table[1].index(cell) == table[0].index(heading), (heading, table)
    assert table[2].split() == ["candidate", "new", "3", "0", "2", "40.0%", "-", "-"]


def test_check_says_which_file_it_read_or_that_it_read_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    cli.main(["check", "--config", config])
    assert capsys.readouterr().out.splitlines()[0] == (
        f"config      {config} + CUTOVER_* environment"
    )
    monkeypatch.delenv("CUTOVER_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check"]) == 1  # defaults alone: no provider, route or token
    assert capsys.readouterr().out.startswith("config      none (no --config nor $CUTOVER_CONFIG)")


def test_webhooks_replay_without_an_id_or_since_says_it_needs_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["webhooks", "replay"])
    assert stop.value.code == 2
    assert "an ID or --since, exactly one of them" in capsys.readouterr().err


def test_an_empty_environment_value_unsets_the_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The example config names /etc/cutover/tls files; an empty override means plain HTTP."""
    config = _config(tmp_path, tmp_path / "nope/cert.pem", tmp_path / "nope/key.pem")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_CERT_FILE", "")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_KEY_FILE", "")
    monkeypatch.setenv("CUTOVER_GATEWAY__CALLBACK_URL", "")
    gateway = load_settings(Path(config)).gateway
    assert (gateway.tls_cert_file, gateway.tls_key_file, gateway.callback_url) == (
        None, None, None,
    )
    assert gateway.public_url == "http://127.0.0.1:0"


@pytest.mark.parametrize(
    "argv", [["routes", "list"], ["shadow", "report", "--route", "acme/echo"],
             ["webhooks", "list-dead"], ["migrate"]],
)
def test_store_commands_without_a_config_refuse_instead_of_creating_cutover_db(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUTOVER_CONFIG", raising=False)
    monkeypatch.delenv("CUTOVER_GATEWAY__DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    assert f"'cutover {argv[0]}' works on the gateway's database" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("CUTOVER_GATEWAY__DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/x.db")
    monkeypatch.setenv("CUTOVER_GATEWAY__STORAGE_URL", f"file://{tmp_path}/assets")
    code = cli.main(argv)  # configured from the environment alone: it runs
    assert code in (0, 1) and (tmp_path / "x.db").exists()


def test_serve_on_a_taken_port_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was uvloop's traceback ending in "[Errno 98] error while attempting to bind"."""
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_CERT_FILE", "")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_KEY_FILE", "")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        monkeypatch.setenv("CUTOVER_GATEWAY__LISTEN", listen)
        assert cli.main(["serve", "--config", config]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"cutover: cannot listen on [gateway] listen = {listen}: Address "
                       "already in use (another process has that port, or the address is not "
                       "one of this machine's)")


def test_shadow_report_to_an_unwritable_output_names_the_file_not_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    target = tmp_path / "missing-dir" / "report.html"
    argv = ["shadow", "report", "--route", "acme/echo", "--format", "html",
            "--output", str(target), "--config", config]
    assert cli.main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"cutover: cannot write --output {target}: No such file or directory"
    ]
    target.parent.mkdir()
    assert cli.main(argv) == 0
    assert target.read_text().startswith("<!doctype html>")


def test_an_unreachable_store_is_named_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve printed asyncpg's traceback; routes said only "(ConnectionRefusedError)"."""
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        monkeypatch.setenv("CUTOVER_GATEWAY__DATABASE_URL",
                           f"postgresql+asyncpg://cutover:s3cret@127.0.0.1:{port}/none")
        monkeypatch.setenv("CUTOVER_GATEWAY__TLS_CERT_FILE", "")
        monkeypatch.setenv("CUTOVER_GATEWAY__TLS_KEY_FILE", "")
        assert cli.main(["routes", "list", "--config", config]) == 1
        assert cli.main(["serve", "--config", config]) == 2
    routes, serve = [line for line in capsys.readouterr().err.splitlines()
                     if line.startswith("cutover: ")]
    where = f"postgresql+asyncpg://127.0.0.1:{port}/none (ConnectionRefusedError: "
    assert routes.startswith(f"cutover: cannot reach the store at {where}"), routes
    assert serve.startswith(f"cutover: cannot start: cannot reach the store at {where}"), serve
    assert "s3cret" not in routes + serve


def test_log_levels_are_read_in_any_case_and_a_wrong_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--log-level debug`` and ``[logging] level = "debug"`` ended in a ValueError traceback."""
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_CERT_FILE", "")
    monkeypatch.setenv("CUTOVER_GATEWAY__TLS_KEY_FILE", "")
    assert cli.main(["check", "--config", config, "--log-level", "debug"]) == 0
    monkeypatch.setenv("CUTOVER_LOGGING__LEVEL", "warning")
    assert load_settings(Path(config)).logging.level == "WARNING"
    assert cli.main(["check", "--config", config]) == 0
    with pytest.raises(SystemExit) as stop:
        cli.main(["check", "--config", config, "--log-level", "loud"])
    assert stop.value.code == 2 and "invalid choice: 'LOUD'" in capsys.readouterr().err
    monkeypatch.setenv("CUTOVER_LOGGING__LEVEL", "loud")
    assert cli.main(["check", "--config", config]) == 2
    assert "logging.level: Input should be 'DEBUG'" in capsys.readouterr().err


def test_a_closed_stdout_is_not_reported_as_an_unreachable_store(tmp_path: Path) -> None:
    """``cutover routes list | head -1`` said "cannot reach the store (BrokenPipeError)"."""
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    with os.fdopen(write, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "routes", "list", "--config", config],
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )
    assert done.returncode == 1 and done.stderr == "", done.stderr


@pytest.mark.parametrize(("toml", "line"), [
    ('[[route]]\nmodel = "a/b"\n', "route: is not a known setting (did you mean 'routes'?)"),
    ('[gateway]\nlisen = "127.0.0.1:1"\n',
     "gateway.lisen: is not a known setting (did you mean 'listen'?)"),
    ('[providers.c]\nkind = "cog"\nbase_ur = "http://x"\n',
     "providers.c.base_ur: is not a known setting (did you mean 'base_url'?)"),
    ('[[routes]]\nmodle = "a/b"\nprovider = "x"\n',
     "routes.0.modle: is not a known setting (did you mean 'model'?)"),
    ('[gateway]\nzzzz = 1\n', "gateway.zzzz: is not a known setting"),
])
def test_an_unknown_key_near_a_known_one_is_named(
    toml: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "cutover.toml"
    path.write_text(toml)
    assert cli.main(["check", "--config", str(path)]) == 2
    assert f"  {line}" in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("limit", ["0", "-5", "5000"])
def test_a_list_dead_limit_out_of_range_is_a_usage_error(
    limit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """It was exit 1 after opening the store; docs/webhooks.md says bad arguments are 2."""
    config = _config(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    with pytest.raises(SystemExit) as exited:
        cli.main(["webhooks", "list-dead", f"--limit={limit}", "--config", config])
    assert exited.value.code == 2
    assert f"'{limit}' is not a number from 1 to 1000" in capsys.readouterr().err
    assert not (tmp_path / "cutover.db").exists()
