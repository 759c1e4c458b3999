"""GET of an in-flight prediction across two gateway processes, in front of the real Cog
server (docs/lifecycle.md, "Reads of a prediction").

Two ``cutover serve`` processes (HTTPS) share one database; predictions are created on
the first, Cog's webhooks applied by whichever dispatched them, and the app's webhooks
(every event) go to a receiver. Once the app has a webhook, a GET to either process shows
that change or a later one, never an earlier state, though each process keeps the JSON it
made for a row version; logs growing during a run are visible from the other process; each
process answers with its own URLs.
"""

from __future__ import annotations

import asyncio
import itertools
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
RANK = {"starting": 0, "processing": 1, "succeeded": 2, "failed": 2, "canceled": 2}


# Both backends whatever the run: two processes on one PostgreSQL is the case that matters.
@pytest.fixture(scope="module", params=BACKENDS)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS, https_cog: CogServer,
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    workdir: Path = tmp_path_factory.mktemp(f"get-current-{request.param}")
    with sync_database(request.param, workdir) as database_url:
        started: list[GatewayProcess] = []
        try:
            for _ in range(2):
                config = live_config(database_url=database_url, workdir=workdir, tls=tls,
                                     cog_url=https_cog.url, cog_token=COG_WEBHOOK_TOKEN)
                started.append(GatewayProcess(config, workdir, ca_file=tls.ca_file).start())
            yield started[0], started[1]
        finally:
            for process in started:
                process.stop()


@pytest.fixture
async def http(tls: ServerTLS) -> AsyncIterator[httpx.AsyncClient]:
    verify = ssl.create_default_context(cafile=str(tls.ca_file))
    async with httpx.AsyncClient(verify=verify, headers=AUTH, timeout=30) as client:
        yield client


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


async def create(http: httpx.AsyncClient, gateway: GatewayProcess, receiver: Receiver,
                 **model_input: Any) -> str:
    body = {"version": ECHO_VERSION, "input": {"prompt": "poll", **model_input},
            "webhook": receiver.url("/hook"),
            "webhook_events_filter": ["start", "output", "logs", "completed"]}
    response = await http.post(f"{gateway.url}/v1/predictions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def get(http: httpx.AsyncClient, gateway: GatewayProcess, job_id: str) -> dict[str, Any]:
    response = await http.get(f"{gateway.url}/v1/predictions/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def not_older(seen: dict[str, Any], told: dict[str, Any]) -> None:
    """``seen`` (a GET) shows the state of ``told`` (a webhook the app had) or a later one."""
    assert RANK[seen["status"]] >= RANK[told["status"]], (seen["status"], told["status"])
    assert (seen["logs"] or "").startswith(told["logs"] or ""), (seen["logs"], told["logs"])
    if told["status"] in ("succeeded", "failed", "canceled"):
        assert (seen["status"], seen["output"]) == (told["status"], told["output"])


async def test_a_get_after_each_webhook_shows_it_on_either_process(
    pair: tuple[GatewayProcess, GatewayProcess], http: httpx.AsyncClient, receiver: Receiver,
) -> None:
    first, second = pair
    job_id = await create(http, first, receiver, steps=5, delay=0.3)
    logs_seen: set[str] = set()
    done = asyncio.Event()

    async def poll_the_other() -> None:  # what wait() does, on the other process
        while not done.is_set():
            seen = await get(http, second, job_id)
            if seen["status"] == "processing":
                logs_seen.add(seen["logs"])
            await asyncio.sleep(0.05)

    poller = asyncio.create_task(poll_the_other())
    checked = 0
    try:
        while True:
            hooks = await receiver.wait_for(checked + 1, timeout_s=60)
            told = hooks[checked].payload
            for gateway in (second, first):
                seen = await get(http, gateway, job_id)
                not_older(seen, told)
                assert seen["urls"]["get"] == f"{gateway.url}/v1/predictions/{job_id}"
                assert seen["urls"]["stream"].startswith(f"{gateway.url}/streams/{job_id}?t=")
            checked += 1
            if told["status"] == "succeeded":
                break
    finally:
        done.set()
        await poller
    assert told["output"] == "POLL"
    growing = sorted(logs_seen, key=len)  # each one a prefix of the next: logs only grow
    assert len([logs for logs in growing if "step" in logs]) >= 2, growing
    assert all(b.startswith(a) for a, b in itertools.pairwise(growing))


async def test_a_get_after_its_own_cancel_and_the_canceled_webhook(
    pair: tuple[GatewayProcess, GatewayProcess], http: httpx.AsyncClient, receiver: Receiver,
) -> None:
    first, second = pair
    job_id = await create(http, first, receiver, steps=100, delay=0.1)

    async def processing() -> bool:
        return (await get(http, second, job_id))["status"] == "processing"

    await wait_until(processing, 60, what="the prediction running, seen by the second")
    response = await http.post(f"{second.url}/v1/predictions/{job_id}/cancel")
    assert response.status_code == 200
    answered = response.json()
    for gateway in (second, first):
        not_older(await get(http, gateway, job_id), answered)

    async def canceled_hook() -> dict[str, Any] | None:
        hooks = [h.payload for h in receiver.received]
        return next((h for h in hooks if h["status"] == "canceled"), None)

    told = await wait_until(canceled_hook, 60, what="the canceled webhook")
    for gateway in (second, first):
        not_older(await get(http, gateway, job_id), told)
