"""A live stack for streaming tests: real Cog running examples/tokens <- the gateway
(an HTTPS subprocess) <- the official clients. One per database backend per module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.live import LIVE_TOKEN, LiveGateway, live_config
from tests.support.process import GatewayProcess
from tests.support.tls import ServerTLS

__all__ = ["TOKENS_MODEL", "TOKENS_MODEL_DIR", "running_tokens_gateway", "tokens_cog"]

TOKENS_MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "tokens"
TOKENS_MODEL = "acme/tokens"


@contextmanager
def tokens_cog(tls: ServerTLS) -> Iterator[CogServer]:
    """Cog serving the streaming model; it trusts the test CA for its webhooks and (its
    Python worker downloads inputs with ``requests``) for file inputs on the gateway."""
    env = {
        "WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN,
        "SSL_CERT_FILE": str(tls.ca_file),
        "REQUESTS_CA_BUNDLE": str(tls.ca_file),
    }
    with CogServer(TOKENS_MODEL_DIR, env=env) as server:
        yield server


@contextmanager
def running_tokens_gateway(
    backend: str, workdir: Path, tls: ServerTLS, cog_url: str, **gateway: object
) -> Iterator[LiveGateway]:
    """The gateway routing ``acme/tokens`` to Cog at ``cog_url``, on a new database."""
    with sync_database(backend, workdir) as database_url:
        config = live_config(
            database_url=database_url, workdir=workdir, tls=tls, cog_url=cog_url,
            cog_token=COG_WEBHOOK_TOKEN, **gateway,
        )
        config["routes"] = [{"model": TOKENS_MODEL, "provider": "local-cog"}]
        process = GatewayProcess(config, workdir, ca_file=tls.ca_file).start()
        try:
            yield LiveGateway(process=process, database_url=database_url)
        finally:
            process.stop()


__all__ += ["LIVE_TOKEN"]
