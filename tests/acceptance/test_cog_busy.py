"""The real Cog server's 409 "At capacity" (coglet 0.23.1, docs/cog.md §1.4, §1.11) is a
busy provider, never a failed prediction: the submit waits out a short backoff (full
jitter, ``dispatch_backoff_base_s`` doubling to ``dispatch_backoff_max_s``) and goes
again, as often as that backoff allows and no more.

Cog has one slot here and the gateway believes it has two, so every submit beyond the
running prediction meets Cog's own refusal, as one after a prediction whose slot Cog had
not yet freed does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN, ECHO_MODEL_DIR
from tests.support.process import GatewayProcess, listen_port
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog]

API_TOKEN = "r8_busy_test_token"  # a test value, not a credential
HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
PREDICTIONS = 3
SLOW = {"steps": 2, "delay": 0.5}  # one second each: the others wait at Cog's 409
TERMINAL = {"succeeded", "failed", "canceled"}


def _busy_submits(metrics: str) -> float:
    found = re.search(r'^cutover_provider_submits_total\{outcome="busy",provider="cog"\} (\S+)$',
                      metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_cogs_at_capacity_answers_delay_the_predictions_and_fail_none(tmp_path: Path) -> None:
    with CogServer(ECHO_MODEL_DIR, env={"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN}) as cog, \
            sync_database("sqlite", tmp_path) as database_url:
        port = listen_port()
        config: dict[str, Any] = {
            "gateway": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
                        "database_url": database_url,
                        "storage_url": f"file://{tmp_path / 'assets'}",
                        "api_tokens": [API_TOKEN], "loop_interval_s": 0.1},
            "providers": {"cog": {"kind": "cog", "base_url": cog.url, "max_concurrency": 2,
                                  "webhook_auth_token": COG_WEBHOOK_TOKEN}},
            "routes": [{"model": "acme/echo", "provider": "cog"}],
        }
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            with httpx.Client(base_url=gateway.url, headers=HEADERS, timeout=30) as http:
                made = [http.post("/v1/predictions", json={
                    "version": "acme/echo", "input": {"prompt": f"p{n}", **SLOW}})
                    for n in range(PREDICTIONS)]
                assert all(r.status_code == 201 for r in made), [r.text for r in made]
                urls = [f"/v1/predictions/{r.json()['id']}" for r in made]

                def finished() -> list[dict[str, Any]] | None:
                    got = [http.get(url).json() for url in urls]
                    return got if all(g["status"] in TERMINAL for g in got) else None

                done = wait_until_sync(finished, 60, what="every prediction finished")
                busy = _busy_submits(http.get("/metrics").text)
        finally:
            gateway.stop()
    assert [(d["status"], d["error"]) for d in done] == [("succeeded", None)] * PREDICTIONS
    assert [d["output"] for d in done] == [f"P{n}" for n in range(PREDICTIONS)]
    assert busy >= 1, "no submit met Cog's 409: the scenario did not happen"
    # A tight loop (every loop_interval_s, 0.1 s) would make ~10 a second for each waiting
    # prediction; the backoff's caps (0.2, 0.4, 0.8, 1.6, 3.2 s) allow a handful in the
    # two seconds the last one waits.
    assert busy <= 8 * (PREDICTIONS - 1), busy
