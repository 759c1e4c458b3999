"""A Cog provider with ``held = true`` (docs/cog.md §3) in front of the real Cog server, driven
by the unmodified ``replicate`` client: synchronous predictions held open, no webhook
asked for or received; a prediction longer than the answer window handed over when Cog
answers; a cancel through Cog's cancel; a stopping gateway waiting for what it holds; a
crash mid-hold ending the prediction as lost.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import replicate

from tests.acceptance.test_replicate_client import close_client
from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.fixtures import ECHO_MODEL_DIR
from tests.support.process import GatewayProcess, listen_port
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog]

API_TOKEN = "r8_held_test_token"  # a test value, not a credential
HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
TERMINAL = {"succeeded", "failed", "canceled"}


def held_config(tmp_path: Path, database_url: str, cog: CogServer, port: int,
                **provider: Any) -> dict[str, Any]:
    return {
        "gateway": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
                    "database_url": database_url, "storage_url": f"file://{tmp_path / 'assets'}",
                    "api_tokens": [API_TOKEN], "loop_interval_s": 0.1},
        "providers": {"cog": {"kind": "cog", "base_url": cog.url, "held": True, **provider}},
        "routes": [{"model": "acme/echo", "provider": "cog"}],
    }


def webhooks_received(metrics: str) -> float:
    found = re.findall(r'^cutover_provider_webhooks_total\{[^}]*provider="cog"[^}]*\} (\S+)$',
                       metrics, re.MULTILINE)
    return sum(float(value) for value in found)


def finished(http: httpx.Client, prediction_id: str) -> dict[str, Any] | None:
    got = http.get(f"/v1/predictions/{prediction_id}").json()
    return got if got["status"] in TERMINAL else None


def test_held_predictions_complete_through_the_replicate_client_without_webhooks(
        tmp_path: Path) -> None:
    with CogServer(ECHO_MODEL_DIR) as cog, sync_database("sqlite", tmp_path) as database_url:
        gateway = GatewayProcess(held_config(tmp_path, database_url, cog, listen_port()),
                                 tmp_path).start()
        try:
            client = replicate.Client(api_token=API_TOKEN, base_url=gateway.url)
            assert client.run("acme/echo", input={"prompt": "quick"}) == "QUICK"
            # longer than the answer window: held, then handed over when Cog answers
            slow = client.predictions.create(
                version="acme/echo", input={"prompt": "slow", "steps": 3, "delay": 0.3})
            slow.wait()
            close_client(client)
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=30) as http:
                metrics = http.get("/metrics").text
        finally:
            gateway.stop()
    assert (slow.status, slow.output, slow.error) == ("succeeded", "SLOW", None)
    assert slow.logs == "step 1/3\nstep 2/3\nstep 3/3\n"
    assert webhooks_received(metrics) == 0
    assert "provider-webhooks" not in gateway.log_text()


def test_a_held_prediction_canceled_by_the_client_ends_canceled(tmp_path: Path) -> None:
    with CogServer(ECHO_MODEL_DIR) as cog, sync_database("sqlite", tmp_path) as database_url:
        gateway = GatewayProcess(held_config(tmp_path, database_url, cog, listen_port()),
                                 tmp_path).start()
        try:
            client = replicate.Client(api_token=API_TOKEN, base_url=gateway.url)
            long = client.predictions.create(
                version="acme/echo", input={"prompt": "long", "steps": 100, "delay": 0.1})
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=30) as http:
                wait_until_sync(lambda: cog.health() == "BUSY", 30, what="Cog running it")
                long.cancel()
                close_client(client)
                done = wait_until_sync(lambda: finished(http, long.id), 30,
                                       what="the held prediction canceled")
        finally:
            gateway.stop()
    assert done["status"] == "canceled"


def held_across_a_restart(tmp_path: Path, crash: bool) -> dict[str, Any]:
    """A two-second held prediction, its gateway stopped (SIGTERM) or crashed (SIGKILL)
    while Cog runs it, then started again on the same store: the prediction as it ends."""
    with CogServer(ECHO_MODEL_DIR) as cog, sync_database("sqlite", tmp_path) as database_url:
        config = held_config(tmp_path, database_url, cog, listen_port(),
                             fetch_interval_s=0.5, fetch_max_interval_s=0.5, lost_grace_s=0.5)
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=30) as http:
                made = http.post("/v1/predictions", json={
                    "version": "acme/echo", "input": {"prompt": "x", "steps": 2, "delay": 1}})
                assert made.status_code == 201, made.text
                prediction_id = made.json()["id"]
                url = f"/v1/predictions/{prediction_id}"
                # processing: the submit recorded, the prediction held (a crash before
                # that record is a submit that may have reached Cog: it is sent again)
                wait_until_sync(lambda: http.get(url).json()["status"] == "processing", 30,
                                what="the prediction held")
        finally:
            gateway.kill() if crash else gateway.stop()
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=30) as http:
                return wait_until_sync(lambda: finished(http, prediction_id), 60,
                                       what="the prediction ended")
        finally:
            gateway.stop()


def test_a_stopping_gateway_waits_for_the_prediction_it_holds(tmp_path: Path) -> None:
    done = held_across_a_restart(tmp_path, crash=False)
    assert (done["status"], done["output"]) == ("succeeded", "X")


def test_a_gateway_crash_mid_hold_ends_the_prediction_as_lost(tmp_path: Path) -> None:
    done = held_across_a_restart(tmp_path, crash=True)
    assert done["status"] == "failed"
    assert "no longer knows this prediction" in done["error"]
