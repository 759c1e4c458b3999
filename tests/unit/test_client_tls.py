"""One verified client SSL context per process (adapters/tls.py; docs/providers.md, "TLS to
providers"): every provider client and output download shares it, and verification is
what httpx's default was (an untrusted certificate is refused; ``SSL_CERT_FILE`` counts
where it counted)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trustme
from aiohttp import web

from adapters import transport
from adapters.aiotransport import AiohttpTransport
from adapters.cog import CogAdapter
from adapters.remote_fake import RemoteFakeAdapter
from adapters.tls import client_context
from contracts.errors import UpstreamUnreachable
from gateway.files import download


def _context_of(client: httpx.AsyncClient) -> ssl.SSLContext:
    if isinstance(client._transport, AiohttpTransport):  # the Cog adapter's
        return client._transport.ssl_context
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]


@pytest.fixture
def no_ca_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def https_url(ca: trustme.CA) -> AsyncIterator[str]:
    """An HTTPS server on 127.0.0.1 whose certificate comes from a CA nobody trusts."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    app = web.Application()
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello", content_type="text/plain")

    app.router.add_get("/{tail:.*}", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"https://127.0.0.1:{port}"
    await runner.cleanup()


async def test_every_provider_client_shares_one_verified_context(no_ca_env: None) -> None:
    clients = [
        CogAdapter(name="a", base_url="http://127.0.0.1:9")._client,
        CogAdapter(name="b", base_url="http://127.0.0.1:10")._client,
        RemoteFakeAdapter(name="c", base_url="http://127.0.0.1:11", secret="s")._client,
        transport.Upstream(name="d", base_url="https://d.test").client,
        transport.Upstream(name="e", base_url="https://e.test").client,
    ]
    shared = client_context()
    assert all(_context_of(client) is shared for client in clients)
    assert client_context(trust_env=False) is shared  # output downloads use this one
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    default = httpx.create_ssl_context()  # what each client built for itself before
    assert shared.cert_store_stats() == default.cert_store_stats()
    # (as a set: a failed verification of an earlier test sorts OpenSSL's store)
    assert _serials(shared) == _serials(default)
    for client in clients:
        await client.aclose()


def _serials(context: ssl.SSLContext) -> set[str]:
    return {str(cert["serialNumber"]) for cert in context.get_ca_certs()}


async def test_an_untrusted_certificate_is_refused(no_ca_env: None, https_url: str,
                                                   tmp_path: Path) -> None:
    cog = CogAdapter(name="a", base_url=https_url)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await cog._client.get("/")
    await cog.aclose()
    up = transport.Upstream(name="d", base_url=https_url)
    with pytest.raises(UpstreamUnreachable) as refused:
        await up.call("probe", "GET", "/")
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.__cause__)
    await up.aclose()
    with pytest.raises(download.DownloadFailed, match="SSLCertVerificationError"):
        await download.download(f"{https_url}/f", tmp_path / "f", max_bytes=100,
                                timeout_s=10, accept=lambda kind: kind)


async def test_ssl_cert_file_still_counts_where_httpx_read_it(
    no_ca_env: None, https_url: str, ca: trustme.CA, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Cog client (``trust_env`` on) trusts ``SSL_CERT_FILE``; the hosted providers'
    clients (``trust_env=False``) and downloads still use certifi's bundle alone."""
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    cog = CogAdapter(name="a", base_url=https_url)
    assert _context_of(cog._client) is client_context() is not client_context(trust_env=False)
    assert (await cog._client.get("/")).text == "hello"
    await cog.aclose()
    up = transport.Upstream(name="d", base_url=https_url)
    with pytest.raises(UpstreamUnreachable):
        await up.call("probe", "GET", "/")
    await up.aclose()
