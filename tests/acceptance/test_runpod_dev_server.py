"""The RunPod adapter against the ``runpod`` package's own local test server (1.12.0).

``python handler.py --rp_serve_api`` serves ``/run`` and ``/status/{id}`` at the root and
takes POST for the status (docs/providers.md, "runpod"): the adapter's
``status_method="POST"`` and an empty target fit it. The server runs a real handler
inside the first status call; it cannot stand in for the cloud's queue, cancel or expiry
(the fake in tests/support/upstreams/runpod.py does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.runpod import RunPodAdapter
from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest
from tests.support.orphans import die_with_parent
from tests.support.process import free_port
from tests.support.waiting import wait_until_sync

pytest.importorskip("runpod")

HANDLER = '''
import runpod

def handler(job):
    data = job["input"]
    if data.get("fail"):
        raise ValueError("asked to fail: " + str(data.get("prompt")))
    return {"echo": str(data.get("prompt", "")).upper()}

runpod.serverless.start({"handler": handler})
'''


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("runpod-handler")
    (folder / "handler.py").write_text(HANDLER)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
    log = (folder / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "handler.py", "--rp_serve_api", "--rp_api_host", "127.0.0.1",
         "--rp_api_port", str(port)],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=die_with_parent,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, folder / "server.log")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0):
    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"runpod test server exited:\n{log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/openapi.json", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until_sync(ready, timeout_s, what="the runpod test server ready")
    except AssertionError:
        raise RuntimeError(f"runpod test server not ready:\n{log.read_text()[-2000:]}") from None


def request(job_id: str, **data: object) -> SubmitRequest:
    return SubmitRequest(job_id=job_id, input=data, model="acme/echo", version="hidden")


async def test_a_real_handler_runs_and_its_output_is_read(dev_server: str):
    adapter = RunPodAdapter(name="rp-dev", base_url=dev_server, status_method="POST")
    try:
        first = await adapter.submit(request("j1", prompt="hello"))
        assert first.state is JobState.RUNNING and first.raw_status == "IN_PROGRESS"
        ref = ProviderRef(job_id="j1", provider_job_id=first.provider_job_id)
        done = await adapter.fetch(ref)
        assert (done.state, done.output) == (JobState.COMPLETED, {"echo": "HELLO"})
    finally:
        await adapter.aclose()


async def test_a_failing_handler_is_failed_with_its_message(dev_server: str):
    adapter = RunPodAdapter(name="rp-dev", base_url=dev_server, status_method="POST")
    try:
        first = await adapter.submit(request("j2", prompt="boom", fail=True))
        ref = ProviderRef(job_id="j2", provider_job_id=first.provider_job_id)
        done = await adapter.fetch(ref)
        assert done.state is JobState.FAILED
        assert done.error is not None and "asked to fail: boom" in done.error
        assert len(done.error) < 1200
    finally:
        await adapter.aclose()
