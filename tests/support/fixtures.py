"""Shared pytest fixtures; the lead imports them into ``tests/conftest.py``.

``cog_server``: one real Cog server (coglet 0.23.1) running ``examples/echo`` for the
whole session, started with ``WEBHOOK_AUTH_TOKEN=COG_WEBHOOK_TOKEN`` so its webhooks
carry ``Authorization: Bearer <token>`` (providers.md §1.9). It has one prediction slot:
a test that starts a prediction must see it end (or cancel it) before returning, and
should use unique prediction ids (``uuid4().hex``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cog_server import CogServer

__all__ = ["COG_WEBHOOK_TOKEN", "ECHO_MODEL_DIR", "cog_server"]

ECHO_MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "echo"
COG_WEBHOOK_TOKEN = "cutover-test-cog-token"  # a test value, not a credential


@pytest.fixture(scope="session")
def cog_server() -> Iterator[CogServer]:
    """A READY Cog server running the echo model, stopped at the end of the session."""
    with CogServer(ECHO_MODEL_DIR, env={"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN}) as server:
        yield server


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A CA and a 127.0.0.1 server certificate; ``SSL_CERT_FILE`` trusts the CA."""
    from tests.support.tls import make_tls

    made = make_tls(tmp_path_factory.mktemp("tls"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(made.ca_file))
        yield made


@pytest.fixture(scope="session")
def https_cog(tls) -> Iterator[CogServer]:  # type: ignore[no-untyped-def]
    """A Cog server that trusts the test CA, so it can post webhooks to an HTTPS gateway."""
    env = {"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN, "SSL_CERT_FILE": str(tls.ca_file)}
    with CogServer(ECHO_MODEL_DIR, env=env) as server:
        yield server
