"""The gateway as the real Cog server's ``--upload-url`` (gateway/files/uploads.py, docs/cog.md
§1.10): a large output file streams from Cog straight into owned storage, never through
a webhook body or the database, with the gateway's memory flat.

``make test`` uploads ``CUTOVER_COG_UPLOAD_MIB`` MiB (64 by default); bench/outputs.py
``--cog`` measures 1 GiB.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cog_server import CogServer
from tests.support.databases import DEFAULT_BACKENDS, sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.process import GatewayProcess, listen_port
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog, pytest.mark.timeout(600)]

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "bigfile"
MIB = int(os.environ.get("CUTOVER_COG_UPLOAD_MIB", "64"))
UPLOAD_TOKEN = "upload-token-for-tests-0123456789"  # a test value, not a credential
API_TOKEN = "r8_upload_test_token"
HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
MAX_GROWTH_MIB = 64


class Stack:
    """The gateway's port (fixed before Cog starts: Cog's upload URL names it) and Cog."""

    def __init__(self, port: int, cog: CogServer) -> None:
        self.port = port
        self.cog = cog

    def config(self, database_url: str, workdir: Path, **gateway: Any) -> dict[str, Any]:
        return {
            "gateway": {
                "listen": f"127.0.0.1:{self.port}",
                "public_url": f"http://127.0.0.1:{self.port}",
                "database_url": database_url,
                "storage_url": f"file://{workdir / 'assets'}",
                "api_tokens": [API_TOKEN],
                "max_output_bytes": (MIB + 1) << 20,
                "loop_interval_s": 0.1,
                **gateway,
            },
            "providers": {
                "cog": {
                    "kind": "cog", "base_url": self.cog.url, "upload_token": UPLOAD_TOKEN,
                    "webhook_auth_token": COG_WEBHOOK_TOKEN,
                }
            },
            "routes": [{"model": "acme/bigfile", "provider": "cog"}],
        }


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    port = listen_port()
    upload_url = f"http://127.0.0.1:{port}/provider-uploads/cog/{UPLOAD_TOKEN}/"
    env = {"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN}
    with CogServer(MODEL_DIR, env=env, args=["--upload-url", upload_url]) as cog:
        yield Stack(port, cog)


def expected_sha256(mib: int, seed: int) -> str:
    import random

    block = random.Random(seed).randbytes(1 << 20)
    digest = hashlib.sha256()
    for _ in range(mib):
        digest.update(block)
    return digest.hexdigest()


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def run(http: httpx.Client, model_input: dict[str, Any], timeout_s: float = 300) -> dict:
    created = http.post("/v1/predictions", json={"version": "acme/bigfile", "input": model_input})
    assert created.status_code == 201, created.text
    url = f"/v1/predictions/{created.json()['id']}"

    def finished() -> dict | None:
        body: dict = http.get(url).json()
        return body if body["status"] in {"succeeded", "failed", "canceled"} else None

    done: dict = wait_until_sync(finished, timeout_s, what="the prediction finished")
    return done


@pytest.mark.parametrize("backend", DEFAULT_BACKENDS)
def test_a_large_cog_output_streams_into_owned_storage_with_flat_memory(
    backend: str, tmp_path: Path, stack: Stack
):
    with sync_database(backend, tmp_path) as database_url:
        gateway = GatewayProcess(stack.config(database_url, tmp_path), tmp_path).start()
        try:
            pid = gateway._proc.pid  # type: ignore[union-attr]
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=60) as http:
                run(http, {"mib": 1, "seed": 1})  # warm: first prediction, first upload
                before = kib(pid, "VmRSS")
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
                done = run(http, {"mib": MIB, "seed": 7})
                growth_mib = (kib(pid, "VmHWM") - before) / 1024
                assert done["status"] == "succeeded", done["error"]
                url = done["output"]
                assert url.startswith(f"{gateway.url}/assets/{done['id']}/"), url
                digest, size = hashlib.sha256(), 0
                with http.stream("GET", url.removeprefix(gateway.url)) as response:
                    assert response.status_code == 200
                    for chunk in response.iter_bytes(1 << 20):
                        digest.update(chunk)
                        size += len(chunk)
        finally:
            gateway.stop()
    assert size == MIB << 20
    assert digest.hexdigest() == expected_sha256(MIB, 7)
    stored = tmp_path / "assets" / url.removeprefix(f"{gateway.url}/assets/")
    assert stored.stat().st_size == MIB << 20  # moved into the storage directory
    assert growth_mib < MAX_GROWTH_MIB, f"the gateway's RSS grew by {growth_mib:.0f} MiB"
    assert "output_uploaded" in gateway.log_text()


def test_an_upload_the_gateway_refused_fails_the_prediction(tmp_path: Path, stack: Stack):
    """Cog fails a prediction whose upload was refused (docs/cog.md §1.10); strangers
    cannot upload at all."""
    with sync_database("sqlite", tmp_path) as database_url:
        config = stack.config(database_url, tmp_path, max_output_bytes=1 << 20)
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=60) as http:
                done = run(http, {"mib": 2})
                strangers = [
                    http.put(f"/provider-uploads/cog/{'x' * 32}/f.bin", content=b"x",
                             headers={"X-Prediction-Id": done["id"]}),
                    http.put(f"/provider-uploads/cog/{UPLOAD_TOKEN}/f.bin", content=b"x"),
                    http.put(f"/provider-uploads/other/{UPLOAD_TOKEN}/f.bin", content=b"x",
                             headers={"X-Prediction-Id": done["id"]}),
                ]
        finally:
            gateway.stop()
    assert done["status"] == "failed"
    assert "upload returned status 413" in done["error"]
    assert done["output"] is None
    assert [r.status_code for r in strangers] == [404, 404, 404]
    assert "output_upload_refused" in gateway.log_text()
