"""``[providers.NAME] ca_file``: checked by ``cutover check``, one context per CA file, and a
certificate that does not verify reported as such (docs/providers.md, "TLS to providers")."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from adapters import tls
from adapters.transport import Upstream
from contracts.errors import ConfigurationError, UpstreamUnreachable
from gateway import cli
from gateway.providers import build_adapter
from tests.support.tls import make_tls


def _config(tmp_path: Path, ca_file: Path) -> Path:
    path = tmp_path / "cutover.toml"
    path.write_text(
        '[gateway]\napi_tokens = ["r8_test"]\n'
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/cutover.db"\n'
        f'storage_url = "file://{tmp_path}/assets"\n'
        '[providers.inner]\nkind = "openai"\nbase_url = "https://vllm.internal/v1"\n'
        f'ca_file = "{ca_file}"\n'
        '[[routes]]\nmodel = "acme/echo"\nprovider = "inner"\ntarget = "m"\n'
    )
    return path


def _unreadable(tmp_path: Path) -> Path:
    path = tmp_path / "locked.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    path.chmod(0)
    return path


@pytest.mark.parametrize(("make", "says"), [
    (lambda tmp: tmp / "missing.pem", "the file does not exist"),
    (lambda tmp: tmp, "it is a directory, not a PEM file"),
    (lambda tmp: (tmp / "key.txt").write_text("hello") and tmp / "key.txt",
     "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
    (lambda tmp: (tmp / "bad.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    ) and tmp / "bad.pem", "OpenSSL cannot load it"),
    (_unreadable, "it cannot be read (Permission denied)"),
])
def test_check_names_a_ca_file_that_cannot_be_used_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, says: str,  # type: ignore[no-untyped-def]
) -> None:
    ca_file = make(tmp_path)
    if says.startswith("it cannot be read") and os.geteuid() == 0:
        pytest.skip("root reads any file")
    assert cli.main(["check", "--config", str(_config(tmp_path, ca_file))]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "ca_file" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cutover: provider 'inner': ca_file = {ca_file}: {says}")


def test_check_passes_a_good_ca_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    made = make_tls(tmp_path / "tls")
    assert cli.main(["check", "--config", str(_config(tmp_path, made.ca_file))]) == 0
    assert "ca_file" not in capsys.readouterr().err


def test_an_adapter_with_a_ca_file_that_cannot_be_used_is_a_configuration_error(
    tmp_path: Path,
):
    with pytest.raises(ConfigurationError, match=r"provider .up.: ca_file = .*: the file does not"):
        build_adapter("up", "replicate", ca_file=str(tmp_path / "missing.pem"))


def test_one_context_per_distinct_ca_file(tmp_path: Path):
    first, second = make_tls(tmp_path / "a").ca_file, make_tls(tmp_path / "b").ca_file
    one = tls.client_context(trust_env=False, ca_file=first)
    assert tls.client_context(trust_env=False, ca_file=str(first)) is one
    assert tls.client_context(trust_env=False, ca_file=second) is not one
    assert tls.client_context(trust_env=False) is not one
    assert one.verify_mode == ssl.CERT_REQUIRED and one.check_hostname


@pytest.mark.parametrize("kind", ["fal", "runpod", "openai", "replicate"])
async def test_every_hosted_kind_trusts_its_ca_file_and_names_a_verify_failure(
    tmp_path: Path, kind: str,
):
    made = make_tls(tmp_path / "tls")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(made.cert_file, made.key_file)
    async def ping(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/ping", ping)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        trusting = build_adapter("up", kind, base_url=url, token="t", ca_file=str(made.ca_file))
        http = _upstream_of(trusting)
        assert (await http.request("ping", "GET", "/ping")).json() == {"ok": True}
        await trusting.aclose()
        plain = build_adapter("up", kind, base_url=url, token="t")
        with pytest.raises(UpstreamUnreachable) as caught:
            await _upstream_of(plain).request("ping", "GET", "/ping")
        await plain.aclose()
        assert caught.value.detail.startswith("up: ping: certificate verify failed: ")
        assert "cannot connect" not in caught.value.detail
    finally:
        await runner.cleanup()


def _upstream_of(adapter: object) -> Upstream:
    http = getattr(adapter, "_http", None)
    assert isinstance(http, Upstream), type(adapter)
    return http


def test_verify_failure_reads_httpx_s_connect_error():
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate "
                                            "verify failed: self-signed certificate (_ssl.c:1006)")
    cause.verify_message = "self-signed certificate"
    error = httpx.ConnectError(str(cause))
    error.__cause__ = cause
    assert tls.verify_failure(error) == "certificate verify failed: self-signed certificate"
    text_only = httpx.ConnectError(str(cause))
    assert tls.verify_failure(text_only) == "certificate verify failed: self-signed certificate"
    assert tls.verify_failure(httpx.ConnectError("connection refused")) is None


async def test_cog_trusts_its_ca_file_and_names_a_verify_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """Cog keeps its environment rule (SSL_CERT_FILE/DIR) and takes ca_file as well."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    made = make_tls(tmp_path / "tls")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(made.cert_file, made.key_file)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "READY"})

    app = web.Application()
    app.router.add_get("/health-check", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        trusting = build_adapter("cog", "cog", base_url=url, ca_file=str(made.ca_file))
        with trusting._errors("probe", "-"):  # type: ignore[attr-defined]
            assert (await trusting._client.get("/health-check")).status_code == 200  # type: ignore[attr-defined]
        await trusting.aclose()
        plain = build_adapter("cog", "cog", base_url=url)
        with pytest.raises(UpstreamUnreachable, match="cog: probe -: certificate verify failed: "):
            with plain._errors("probe", "-"):  # type: ignore[attr-defined]
                await plain._client.get("/health-check")  # type: ignore[attr-defined]
        await plain.aclose()
    finally:
        await runner.cleanup()
