"""A lifecycle process beside an API process, in front of the real Cog server
(docs/lifecycle.md, "A lifecycle process").

Two ``cutover serve`` processes share one store: the API process, whose ``[gateway]
callback_url`` is the lifecycle process's address, takes the app's creates and GETs; Cog's
webhooks (and so the finalizer and the app's webhooks) go to the lifecycle process. A
prediction created on the API process runs, Cog calls back the lifecycle process only, the
prediction is finished there once, and a GET to the API process shows it finished.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cog_server import CogServer
from tests.support.databases import BACKENDS, sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, live_config
from tests.support.process import GatewayProcess
from tests.support.receiver import Receiver
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cog

AUTH = {"Authorization": f"Bearer {LIVE_TOKEN}"}
HOOK_ROUTE = "/provider-webhooks/{provider}/{job_id}/{token}"


@pytest.fixture(scope="module", params=BACKENDS)
def lanes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS, https_cog: CogServer,
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """``(api, lifecycle)`` on one store."""
    workdir: Path = tmp_path_factory.mktemp(f"lanes-{request.param}")
    with sync_database(request.param, workdir) as database_url:
        common = {"database_url": database_url, "workdir": workdir, "tls": tls,
                  "cog_url": https_cog.url, "cog_token": COG_WEBHOOK_TOKEN}
        started: list[GatewayProcess] = []
        try:
            lifecycle = GatewayProcess(live_config(**common), workdir, ca_file=tls.ca_file)
            started.append(lifecycle.start())
            api_config = live_config(**common, callback_url=lifecycle.url)
            api = GatewayProcess(api_config, workdir, ca_file=tls.ca_file)
            started.append(api.start())
            yield api, lifecycle
        finally:
            for process in started:
                process.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


def _lines(process: GatewayProcess) -> list[dict[str, Any]]:
    found = []
    for line in process.log_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


async def test_provider_webhooks_go_to_the_lifecycle_process_and_reads_see_them(
    lanes: tuple[GatewayProcess, GatewayProcess], tls: ServerTLS, receiver: Receiver,
) -> None:
    api, lifecycle = lanes
    body = {"version": ECHO_VERSION, "input": {"prompt": "lanes", "steps": 3, "delay": 0.1},
            "webhook": receiver.url("/hook"), "webhook_events_filter": ["completed"]}
    verify = ssl.create_default_context(cafile=str(tls.ca_file))
    async with httpx.AsyncClient(verify=verify, headers=AUTH, timeout=30) as http:
        created = await http.post(f"{api.url}/v1/predictions", json=body)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]

        async def finished() -> dict[str, Any] | None:
            seen = (await http.get(f"{api.url}/v1/predictions/{job_id}")).json()
            return seen if seen["status"] == "succeeded" else None

        seen = await wait_until(finished, 60, what="the prediction succeeded, read on the API")
    assert seen["output"] == "LANES"
    hooks = await receiver.wait_for(1, timeout_s=30)
    assert hooks[0].payload["id"] == job_id and hooks[0].payload["status"] == "succeeded"

    def hook_requests(process: GatewayProcess) -> int:
        return sum(1 for line in _lines(process)
                   if line.get("event") == "request" and line.get("route") == HOOK_ROUTE)

    def finishes(process: GatewayProcess) -> int:
        return sum(1 for line in _lines(process)
                   if line.get("event") == "job_finished" and line.get("job_id") == job_id)

    assert hook_requests(lifecycle) >= 1  # Cog's webhooks: started, output..., completed
    assert hook_requests(api) == 0
    assert (finishes(lifecycle), finishes(api)) == (1, 0)
