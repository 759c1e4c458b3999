"""Restart safety (issue: "kill the gateway while jobs are queued and running, start it
again: every job still finishes, once").

The gateway runs as a real subprocess in front of the real Cog server (one slot, so
jobs queue in the gateway). It is SIGKILLed with one job running upstream and others
queued, then started again on the same port: Cog's retried terminal webhook, the lease
expiry of jobs the dead process held, and the dispatcher's queue must between them
finish every job exactly once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.cog_server import CogServer
from tests.support.databases import BACKENDS, sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, live_config
from tests.support.process import GatewayProcess
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until_sync

HEADERS = {"Authorization": f"Bearer {LIVE_TOKEN}"}
TERMINAL = {"succeeded", "failed", "canceled"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_with_jobs_queued_and_running_then_every_job_finishes_once(
    backend: str, tmp_path: Path, tls: ServerTLS, https_cog: CogServer
):
    with sync_database(backend, tmp_path) as database_url:
        config = live_config(
            database_url=database_url,
            workdir=tmp_path,
            tls=tls,
            cog_url=https_cog.url,
            cog_token=COG_WEBHOOK_TOKEN,
            lease_s=1.0,
        )
        first = GatewayProcess(config, tmp_path, ca_file=tls.ca_file).start()
        second = GatewayProcess(config, tmp_path, ca_file=tls.ca_file)
        try:
            with httpx.Client(base_url=first.url, headers=HEADERS, timeout=10) as http:
                ids = [
                    http.post(
                        "/v1/predictions",
                        json={
                            "version": ECHO_VERSION,
                            "input": {"prompt": f"job {i}", "steps": 3, "delay": 0.3},
                        },
                    ).json()["id"]
                    for i in range(5)
                ]

                def statuses() -> list[str]:
                    return [http.get(f"/v1/predictions/{i}").json()["status"] for i in ids]

                wait_until_sync(lambda: "processing" in statuses(), 30, interval_s=0.05)
                before = statuses()
                assert before.count("starting") >= 2, before
                first.kill()
                second.start()
                final = wait_until_sync(
                    lambda: (s := statuses()) and all(x in TERMINAL for x in s) and s, 90,
                    interval_s=0.05,
                )
                assert final == ["succeeded"] * 5
                outputs = [http.get(f"/v1/predictions/{i}").json()["output"] for i in ids]
                assert outputs == [f"JOB {i}" for i in range(5)]
        finally:
            first.kill()
            second.stop()
        finished = Counter(
            line["job_id"]
            for process in (first, second)
            for line in map(_json, process.log_text().splitlines())
            if line.get("event") == "job_finished"
        )
        assert finished == Counter({job_id: 1 for job_id in ids})


def _json(line: str) -> dict:  # type: ignore[type-arg]
    try:
        return json.loads(line)
    except ValueError:
        return {}
