"""Rescue on rollback end to end (docs/canary.md, "Rescue on rollback"): the real Cog
server is the control, the candidate a port nothing listens on; after ``cutover routes
rollback`` every prediction the candidate never accepted ends ``succeeded`` on the
control, run there once."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import replicate

from tests.support.cog_server import CogServer
from tests.support.databases import BACKENDS, sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, live_config
from tests.support.process import GatewayProcess, listen_port
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog, pytest.mark.timeout(240)]

ROUTE = f"acme/echo:{ECHO_VERSION}"
ADMIN = "adm_rescue_live_test"  # a test value, not a credential


@pytest.fixture(params=BACKENDS)
def gateway(
    request: pytest.FixtureRequest, tmp_path: Path, tls: ServerTLS, https_cog: CogServer
) -> Iterator[GatewayProcess]:
    with sync_database(request.param, tmp_path) as database_url:
        config = live_config(database_url=database_url, workdir=tmp_path, tls=tls,
                             cog_url=https_cog.url, cog_token=COG_WEBHOOK_TOKEN,
                             port=listen_port())
        config["providers"]["down"] = {  # nothing listens there: connections are refused
            "kind": "cog", "base_url": "http://127.0.0.1:1",
            "webhook_auth_token": COG_WEBHOOK_TOKEN, "submit_timeout_s": 600,
            "max_concurrency": 10,
        }
        config["routes"][0]["candidate"] = "down"
        config["admin"] = {"tokens": [{"name": "ops-dana", "token": ADMIN}]}
        process = GatewayProcess(config, tmp_path, ca_file=tls.ca_file).start()
        try:
            yield process
        finally:
            process.stop()


def _cli(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = shutil.which("cutover", path=str(Path(sys.executable).parent))
    assert command
    return subprocess.run([command, "routes", *args, "--config", str(gateway.config_path)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_after_a_rollback_what_the_candidate_never_took_succeeds_on_the_control(
    gateway: GatewayProcess, tls: ServerTLS
) -> None:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(tls.ca_file)),
                      timeout=10) as http:
        client = replicate.Client(api_token=LIVE_TOKEN, base_url=gateway.url)
        try:
            _rescue_after_rollback(gateway, http, client)
        finally:
            inner = client._Client__client  # type: ignore[attr-defined]  # no close() of its own
            if inner is not None:
                inner.close()


def _rescue_after_rollback(gateway: GatewayProcess, http: httpx.Client, client: Any) -> None:

    def owner(prediction_id: str) -> dict[str, Any]:
        response = http.get(f"{gateway.url}/admin/predictions/{prediction_id}",
                            headers={"Authorization": f"Bearer {ADMIN}"})
        assert response.status_code == 200, response.text
        return dict(response.json())

    done = _cli(gateway, "set-canary", ROUTE, "100", "--reason", "all in on the candidate")
    assert done.returncode == 0, done.stderr
    def create(prompt: str) -> Any:
        return client.predictions.create(version=ECHO_VERSION, input={"prompt": prompt})

    probes: list[Any] = []

    def on_candidate() -> bool:
        probes.append(create("probe"))
        return owner(probes[-1].id)["provider"] == "down"

    wait_until_sync(on_candidate, 10.0, what="the canary live on the gateway")  # within 2 s
    made = [probes[-1], *(create(f"p{i}") for i in range(3))]  # earlier probes: the control's
    wait_until_sync(lambda: all(owner(p.id)["raw_status"] == "not_connected" for p in made),
                    30.0, what="a refused submit of every prediction on the candidate")
    assert {owner(p.id)["provider"] for p in made} == {"down"}

    done = _cli(gateway, "rollback", ROUTE, "--reason", "the candidate is down")
    assert done.returncode == 0, done.stderr
    for prediction in made:
        wait_until_sync(lambda p=prediction: (p.reload(), p.status)[1] == "succeeded", 60.0,
                        what=f"{prediction.id} succeeded on the control")
        assert prediction.output == prediction.input["prompt"].upper()
        assert prediction.logs.count("Moved to the control: candidate 'down'") == 1
        seen = owner(prediction.id)
        assert (seen["provider"], seen["arm"]) == ("local-cog", "control")
    entries = http.get(f"{gateway.url}/admin/routes/{ROUTE}/changes",
                       headers={"Authorization": f"Bearer {ADMIN}"}).json()["results"]
    assert (entries[0]["who"], entries[0]["action"]) == ("cli", "rollback")
    rescued = entries[0]["evidence"]["rescued"]
    assert rescued["to"] == "local-cog"  # a submit under way at the rollback: the guard
    assert set(rescued["predictions"]) <= {p.id for p in made}  # loop moves it a round later
