"""Shared pytest fixtures; the lead imports them into ``tests/conftest.py``.

``cog_server``: one real Cog server (coglet 0.23.1) running ``examples/echo`` for the
whole session, started with ``WEBHOOK_AUTH_TOKEN=COG_WEBHOOK_TOKEN`` so its webhooks
carry ``Authorization: Bearer <token>`` (docs/cog.md §1.9). Without a schema file it
validates no input (§1.3). ``cog_server_with_schema``: the same model with
``.cog/openapi_schema.json``, so bad inputs get 422 as on a built image. ``tls`` and
``https_cog`` (the lead's): a test CA, and a Cog server that trusts it.

Each server has one prediction slot: a test that starts a prediction must see it end (or
cancel it) before returning, and should use unique prediction ids (``uuid4().hex``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cog_server import CogServer

__all__ = [
    "COG_WEBHOOK_TOKEN",
    "ECHO_MODEL_DIR",
    "ECHO_OPENAPI_SCHEMA",
    "cog_server",
    "cog_server_with_schema",
    "https_cog",
    "s3_server",
    "tls",
]

ECHO_MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "echo"
COG_WEBHOOK_TOKEN = "cutover-test-cog-token"  # a test value, not a credential

#: What ``cog build`` would write for examples/echo (only the parts coglet reads).
ECHO_OPENAPI_SCHEMA: dict[str, Any] = {
    "openapi": "3.0.2",
    "info": {"title": "Cog", "version": "0.1.0"},
    "paths": {},
    "components": {
        "schemas": {
            "Input": {
                "type": "object",
                "title": "Input",
                "required": ["prompt"],
                "properties": {
                    "prompt": {"type": "string", "x-order": 0},
                    "steps": {"type": "integer", "default": 1, "minimum": 0,
                              "maximum": 1000, "x-order": 1},
                    "delay": {"type": "number", "default": 0, "minimum": 0,
                              "maximum": 120, "x-order": 2},
                    "fail": {"type": "boolean", "default": False, "x-order": 3},
                    "output_kind": {"type": "string", "default": "text",
                                    "enum": ["text", "json", "file", "files"], "x-order": 4},
                },
            },
            "Output": {"title": "Output"},
        }
    },
}


@pytest.fixture(scope="session")
def cog_server() -> Iterator[CogServer]:
    """A READY Cog server running the echo model, stopped at the end of the session."""
    with CogServer(ECHO_MODEL_DIR, env={"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN}) as server:
        yield server


@pytest.fixture(scope="session")
def cog_server_with_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CogServer]:
    """Like ``cog_server``, from a copy of the echo model that has an OpenAPI schema."""
    model_dir = tmp_path_factory.mktemp("echo-with-schema")
    shutil.copy(ECHO_MODEL_DIR / "predict.py", model_dir / "predict.py")
    (model_dir / ".cog").mkdir()
    (model_dir / ".cog" / "openapi_schema.json").write_text(json.dumps(ECHO_OPENAPI_SCHEMA))
    with CogServer(model_dir, env={"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN}) as server:
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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """One moto S3 server (its own process, 127.0.0.1, a kernel-picked port) per session."""
    from tests.support.s3_server import S3Server

    with S3Server() as server:
        yield server
