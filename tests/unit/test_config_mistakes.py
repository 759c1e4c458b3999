"""Configuration mistakes a new user makes, each named in one line by ``check`` or
``serve`` (found by hand from a fresh clone, README "Configuration")."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.errors import ConfigurationError
from gateway import cli
from gateway.config import load_settings
from gateway.healthcheck import probe_url

ROUTED = """
[providers.local-cog]
kind = "cog"
base_url = "http://127.0.0.1:5000"

[[routes]]
model = "acme/echo"
provider = "local-cog"
"""


def _config(tmp_path: Path, gateway: str, extra: str = "") -> Path:
    path = tmp_path / "cutover.toml"
    path.write_text(
        f'[gateway]\n{gateway}\napi_tokens = ["r8_test"]\n'
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/cutover.db"\n'
        f'storage_url = "file://{tmp_path}/assets"\n{extra}{ROUTED}'
    )
    return path


@pytest.mark.parametrize(("listen", "says"), [
    # uvloop bound 99999 modulo 65536: the gateway served on 34463, saying nothing
    ("127.0.0.1:99999", "listen port must be 0 to 65535, got '127.0.0.1:99999'"),
    # aiohttp was handed "::1:8080" as a host name
    ("::1:8080", "an IPv6 address goes in brackets, [::1]:8080; got '::1:8080'"),
])
def test_a_listen_address_that_cannot_be_bound_as_written_is_refused(
    listen: str, says: str, tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings(_config(tmp_path, f'listen = "{listen}"'))
    assert f"  gateway.listen: {says}" in raised.value.detail.splitlines()


def test_an_ipv6_listen_address_in_brackets_is_bound_without_them(tmp_path: Path) -> None:
    """``[::1]:8080`` reached aiohttp as the host "[::1]": "cannot reach the store"."""
    gateway = load_settings(_config(tmp_path, 'listen = "[::1]:8080"')).gateway
    assert (gateway.host, gateway.port) == ("::1", 8080)
    assert gateway.public_url == "http://[::1]:8080"
    assert probe_url(gateway) == "http://[::1]:8080/ready"
    anywhere = load_settings(_config(tmp_path, 'listen = "[::]:8080"')).gateway
    assert anywhere.host == "::" and probe_url(anywhere) == "http://[::1]:8080/ready"


def test_serve_on_a_host_that_does_not_resolve_names_the_listener_not_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path, 'listen = "nohost.invalid:8080"')
    assert cli.main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(
        "cutover: cannot listen on [gateway] listen = nohost.invalid:8080: "
    ), err
    assert "store" not in err[-1]


def test_a_signing_secret_the_signer_refuses_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``check`` passed it; ``serve`` started, then stopped on it with a logged traceback."""
    config = _config(tmp_path, "", '[webhooks]\nsigning_secret = "s3cret-abc"\n')
    assert cli.main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "  webhooks.signing_secret: webhook secret must start with 'whsec_'" in err
    assert "s3cret" not in err


def test_an_admin_token_table_without_its_token_is_named_without_pydantic_tags(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "", '[admin]\ntokens = [{name = "alice"}]\n')
    with pytest.raises(ConfigurationError) as raised:
        load_settings(config)
    lines = raised.value.detail.splitlines()[1:]
    assert lines == ["  admin.tokens.0: Input should be a valid string",
                     "  admin.tokens.0.token: Field required"]


def test_an_empty_cutover_config_is_no_configuration_not_the_directory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``CUTOVER_CONFIG=`` said "configuration file . does not exist"."""
    monkeypatch.setenv("CUTOVER_CONFIG", "")
    with pytest.raises(SystemExit):
        cli.main(["routes", "list"])
    assert "give its configuration with --config FILE" in capsys.readouterr().err


def test_check_warns_of_cutover_variables_that_set_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both were ignored without a word, the file's listen kept."""
    monkeypatch.setenv("CUTOVER_GATWAY__LISTEN", "127.0.0.1:9001")
    monkeypatch.setenv("CUTOVER_GATEWAY_LISTEN", "127.0.0.1:9002")
    monkeypatch.setenv("CUTOVER_TEST_FLAG", "1")  # a tool's own flag: no section, no word
    assert cli.main(["check", "--config", str(_config(tmp_path, ""))]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        "cutover: warning: CUTOVER_GATEWAY_LISTEN is ignored: a setting takes two "
        "underscores after its section, CUTOVER_GATEWAY__LISTEN",
        "cutover: warning: CUTOVER_GATWAY__LISTEN names no section of the configuration "
        "and is ignored (did you mean CUTOVER_GATEWAY__LISTEN?)",
    ]


def test_check_names_a_route_whose_schema_cannot_be_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """It passed; serve started and every create on the route was a 500."""
    path = tmp_path / "cutover.toml"
    path.write_text(
        _config(tmp_path, "").read_text()
        + f'openapi_schema = "{tmp_path}/nope.json"\n\n'
        + '[[routes]]\nmodel = "acme/inline"\nprovider = "local-cog"\n'
        + 'openapi_schema = {openapi = "3.1.0"}\n'
    )
    assert cli.main(["check", "--config", str(path)]) == 1
    problems = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("cutover: route")]
    assert problems == [
        f"cutover: route acme/echo: openapi_schema file {tmp_path}/nope.json is unreadable: "
        f"[Errno 2] No such file or directory: '{tmp_path}/nope.json': every create on it "
        "would fail",
        "cutover: route acme/inline: the model schema has no components.schemas.Input "
        "object: every create on it would fail",
    ]


def test_a_directory_given_as_the_configuration_is_named_as_one(tmp_path: Path) -> None:
    """It was "configuration file DIR does not exist"."""
    with pytest.raises(ConfigurationError) as raised:
        load_settings(tmp_path)
    assert raised.value.detail == f"configuration file {tmp_path} is a directory, not a TOML file"


def test_check_names_a_storage_directory_that_cannot_be_made_and_resolves_a_relative_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file where the directory should go passed check; every file output then failed
    and every upload was a 500."""
    (tmp_path / "afile").write_text("")
    config = _config(tmp_path, "")
    monkeypatch.setenv("CUTOVER_GATEWAY__STORAGE_URL", f"file://{tmp_path}/afile/assets")
    assert cli.main(["check", "--config", str(config)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"cutover: storage_url file://{tmp_path}/afile/assets: {tmp_path}/afile is not a "
        f"directory, so {tmp_path}/afile/assets cannot hold output files"
    ]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUTOVER_GATEWAY__STORAGE_URL", "file://var/assets")  # not /var
    assert cli.main(["check", "--config", str(config)]) == 0
    assert (f"storage     file://var/assets (the directory {tmp_path}/var/assets)"
            in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize(("gateway", "admin", "says"), [
    ('named_api_tokens = {a = "r8_a", b = ""}', "", "a gateway API token is empty"),
    ('named_api_tokens = {billing = "r8_b\\n"}', "", "a gateway API token is empty"),
    ("", '[admin]\ntokens = [{name = "alice", token = "adm x"}]\n', "a [admin] token is empty"),
    ("", '[admin]\ntokens = ["r8_test"]\n', "an [admin] token is also a [gateway] API token"),
])
def test_a_token_no_request_can_send_or_an_admin_token_shared_with_apps_is_refused(
    gateway: str, admin: str, says: str, tmp_path: Path,
) -> None:
    """All were accepted: the first three never matched a request; the last let every
    app holding r8_test change routes through the admin API."""
    with pytest.raises(ConfigurationError) as raised:
        load_settings(_config(tmp_path, gateway, admin))
    assert says in raised.value.detail


def test_an_api_token_name_longer_than_the_store_keeps_is_refused(tmp_path: Path) -> None:
    """It was accepted, and on PostgreSQL every prediction and upload of that token was a
    500: its name is the owner of what it creates (jobs.owner, files.owner: 64)."""
    with pytest.raises(ConfigurationError) as raised:
        load_settings(_config(tmp_path, f'named_api_tokens = {{{"n" * 65} = "r8_long"}}'))
    assert "longer than 64 characters" in raised.value.detail
    load_settings(_config(tmp_path, f'named_api_tokens = {{{"n" * 64} = "r8_long"}}'))


LONG_MODEL = f"acme/{'m' * 186}"  # 191 characters, 256 with ":" and a version id


@pytest.mark.parametrize(("providers", "route", "says"), [
    ("p" * 65, 'model = "acme/echo"', "at most 64 characters"),  # jobs.provider
    ("local", f'model = "{LONG_MODEL}"\nversion = "{"a" * 64}"', "longer than 255"),
    ("local", f'model = "{LONG_MODEL}{"m" * 65}"', "longer than 255"),  # jobs.model
    ("local", f'model = "acme/echo"\ndeployment = "{LONG_MODEL}{"m" * 65}"', "longer than 255"),
])
def test_a_provider_or_route_name_longer_than_the_store_keeps_is_refused(
    providers: str, route: str, says: str, tmp_path: Path,
) -> None:
    """Each was accepted, and on PostgreSQL every prediction of the route was a 500
    (jobs.provider holds 64 characters; jobs.route, model and deployment 255)."""
    path = tmp_path / "cutover.toml"
    path.write_text(
        f'[gateway]\napi_tokens = ["r8_test"]\n'
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/cutover.db"\n'
        f'[providers.{providers}]\nkind = "cog"\nbase_url = "http://127.0.0.1:5000"\n'
        f'[[routes]]\n{route}\nprovider = "{providers}"\n'
    )
    with pytest.raises(ConfigurationError) as raised:
        load_settings(path)
    assert says in raised.value.detail


def test_serve_on_a_listen_fd_that_is_no_socket_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """It was socket.socket's OSError traceback."""
    config = str(_config(tmp_path, ""))
    assert cli.main(["serve", "--config", config, "--listen-fd", "987654"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "cutover: --listen-fd 987654 is not an open socket: Bad file descriptor")
    with (tmp_path / "plain.txt").open("w") as plain:
        assert cli.main(["serve", "--config", config, "--listen-fd", str(plain.fileno())]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "is not an open socket: Socket operation on non-socket")


def test_check_names_a_routes_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The summary named the control only: a candidate typed in the wrong route went unseen."""
    path = tmp_path / "cutover.toml"
    path.write_text(_config(tmp_path, "").read_text().replace(
        'provider = "local-cog"\n', 'provider = "local-cog"\ncandidate = "new-cog"\n'
    ) + '\n[providers.new-cog]\nkind = "cog"\nbase_url = "http://127.0.0.1:5001"\n')
    assert cli.main(["check", "--config", str(path)]) == 0
    assert "route       acme/echo:* -> local-cog, candidate new-cog" in (
        capsys.readouterr().out.splitlines())
