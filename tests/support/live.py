"""A live stack for end-to-end tests: real Cog <- gateway subprocess (HTTPS) <- client.

``LiveGateway`` bundles what a test needs: the gateway's base URL, its API token, the
process (to kill and restart it) and the database URL it uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.databases import sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.process import GatewayProcess, listen_port
from tests.support.tls import ServerTLS

__all__ = ["ECHO_VERSION", "LIVE_TOKEN", "LiveGateway", "live_config", "sync_database"]

LIVE_TOKEN = "r8_live_test_token"  # a test value, not a credential
ECHO_VERSION = "9e1f0c3a5b7d2e4f6a8c0b1d3e5f7a9c2b4d6e8f0a1c3e5b7d9f1a3c5e7b9d0f"


def live_config(
    *,
    database_url: str,
    workdir: Path,
    tls: ServerTLS,
    cog_url: str,
    cog_token: str | None,
    port: int | None = None,
    **gateway: Any,
) -> dict[str, Any]:
    """A gateway configuration routing ``acme/echo`` (and ECHO_VERSION) to the Cog server."""
    port = port or listen_port()
    provider: dict[str, Any] = {"kind": "cog", "base_url": cog_url}
    if cog_token:
        provider["webhook_auth_token"] = cog_token
    return {
        "gateway": {
            "listen": f"127.0.0.1:{port}",
            "public_url": f"https://127.0.0.1:{port}",
            "tls_cert_file": str(tls.cert_file),
            "tls_key_file": str(tls.key_file),
            "database_url": database_url,
            "storage_url": f"file://{workdir / 'assets'}",
            "api_tokens": [LIVE_TOKEN],
            "loop_interval_s": 0.1,
            **gateway,
        },
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": {"local-cog": provider},
        "routes": [{"model": "acme/echo", "version": ECHO_VERSION, "provider": "local-cog"}],
    }


@dataclass
class LiveGateway:
    """A running gateway subprocess and how to reach it."""

    process: GatewayProcess
    database_url: str

    @property
    def url(self) -> str:
        return self.process.url


@contextmanager
def running_gateway(
    backend: str, workdir: Path, tls: ServerTLS, cog_url: str, **gateway: Any
) -> Iterator[LiveGateway]:
    """A gateway subprocess on a new database of ``backend``, in front of Cog at ``cog_url``
    (which posts its webhooks with ``COG_WEBHOOK_TOKEN``); stopped and dropped on exit."""
    with sync_database(backend, workdir) as database_url:
        config = live_config(
            database_url=database_url,
            workdir=workdir,
            tls=tls,
            cog_url=cog_url,
            cog_token=COG_WEBHOOK_TOKEN,
            **gateway,
        )
        process = GatewayProcess(config, workdir, ca_file=tls.ca_file).start()
        try:
            yield LiveGateway(process=process, database_url=database_url)
        finally:
            process.stop()
