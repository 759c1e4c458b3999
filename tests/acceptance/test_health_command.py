"""``cutover health``, the container's health check, loads the configuration as ``serve``.

The image's HEALTHCHECK read the TOML file alone, so a gateway moved to another port or
switched to HTTPS by ``CUTOVER_GATEWAY__*`` variables was probed on the file's port and
scheme and reported unhealthy. Here a real ``cutover serve`` is configured that way, and
``cutover health`` runs as a separate process with the same file and environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from gateway.config import GatewaySettings
from gateway.healthcheck import probe_url
from tests.support.gateway import settings_dict
from tests.support.process import GatewayProcess, free_port
from tests.support.tls import ServerTLS, make_tls

ROOT = Path(__file__).resolve().parents[2]


def health(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``cutover health --config FILE`` with ``env`` as its only CUTOVER_* variables (the
    console script, this checkout's code first on the path)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "cutover"), "health", "--config", str(config)],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def tls(tmp_path: Path) -> ServerTLS:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def gateway_by_env(tmp_path: Path, tls: ServerTLS):  # type: ignore[no-untyped-def]
    """A gateway whose file says plain HTTP on one port and whose environment moves it to
    HTTPS on another; yields (process, env)."""
    file_port, env_port = free_port(), free_port()
    config = settings_dict(
        f"sqlite+aiosqlite:///{tmp_path}/cutover.db",
        str(tmp_path / "assets"),
        gateway={"listen": f"127.0.0.1:{file_port}",
                 "public_url": f"https://127.0.0.1:{env_port}"},
    )
    env = {
        "CUTOVER_GATEWAY__LISTEN": f"127.0.0.1:{env_port}",
        "CUTOVER_GATEWAY__TLS_CERT_FILE": str(tls.cert_file),
        "CUTOVER_GATEWAY__TLS_KEY_FILE": str(tls.key_file),
    }
    process = GatewayProcess(config, tmp_path, ca_file=tls.ca_file, env=env).start()
    try:
        yield process, env
    finally:
        process.stop()


def test_health_probes_the_listener_the_environment_configured(gateway_by_env) -> None:  # type: ignore[no-untyped-def]
    process, env = gateway_by_env
    port = env["CUTOVER_GATEWAY__LISTEN"].rpartition(":")[2]
    done = health(process.config_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ready: https://127.0.0.1:{port}/ready"


def test_health_fails_where_no_gateway_listens(gateway_by_env) -> None:  # type: ignore[no-untyped-def]
    """The file alone (what the old check read) names a port nothing listens on."""
    process, _ = gateway_by_env
    file_port = process.config["gateway"]["listen"].rpartition(":")[2]
    done = health(process.config_path, {})
    assert done.returncode == 1
    assert f"cannot reach http://127.0.0.1:{file_port}/ready" in done.stderr


def test_health_fails_when_the_listener_presents_another_certificate(
    gateway_by_env, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """Over HTTPS the configured certificate is the trust anchor: a server with another
    one is not the gateway this configuration describes."""
    process, env = gateway_by_env
    other = trustme.CA().issue_cert("127.0.0.1")
    other.cert_chain_pems[0].write_to_path(str(tmp_path / "other.pem"))
    done = health(process.config_path, {**env, "CUTOVER_GATEWAY__TLS_CERT_FILE":
                                        str(tmp_path / "other.pem")})
    assert done.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr


def test_health_exits_1_not_2_on_a_configuration_that_does_not_load(tmp_path: Path) -> None:
    """Docker reserves exit status 2; a gateway that cannot start is unhealthy (1)."""
    done = health(tmp_path / "missing.toml", {})
    assert done.returncode == 1
    assert "missing.toml does not exist" in done.stderr


@pytest.mark.parametrize(
    ("listen", "url"),
    [("0.0.0.0:8443", "http://127.0.0.1:8443/ready"), ("[::]:8443", "http://[::1]:8443/ready"),
     ("10.0.0.5:80", "http://10.0.0.5:80/ready"), ("[::1]:8080", "http://[::1]:8080/ready")],
)
def test_probe_url_reads_a_wildcard_host_as_loopback(listen: str, url: str) -> None:
    assert probe_url(GatewaySettings(listen=listen)) == url
