"""Helpers for the replay tests on real Cog servers (docs/cutover-day.md, "Replaying
recorded inputs"): the noise model's control and candidate servers, a gateway config
serving them as one route, and a recorded prediction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from contracts.job import JobState
from gateway import ids
from gateway.store.schema import jobs
from tests.support.cog_server import CogServer
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.gateway import GatewayHarness
from tests.support.shadow import NOISE_MODEL
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until_sync

__all__ = ["API_TOKEN", "ROUTE", "noise_cogs", "record", "record_rows", "replay_config"]

ROUTE = "acme/noise"
API_TOKEN = "r8_replay_cog_token"  # a test value, not a credential


@contextmanager
def noise_cogs() -> Iterator[dict[str, CogServer]]:
    """``control`` (examples/noise) and ``candidate`` (its red-shifted variant) servers."""
    stubs = {"control": "predict.py:Predictor", "candidate": "predict.py:CandidatePredictor"}
    started: dict[str, CogServer] = {}
    try:
        for arm, stub in stubs.items():
            server = CogServer(NOISE_MODEL.parent, env={"COG_PREDICT_TYPE_STUB": stub,
                                                        "WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN})
            server.start()
            started[arm] = server
        for server in started.values():
            server.wait_ready()
        yield started
    finally:
        for server in started.values():
            server.stop()


def replay_config(tmp: Path, port: int, cogs: dict[str, CogServer], *, admin: list[Any],
                  max_concurrent: int = 4, tls: ServerTLS | None = None) -> dict[str, Any]:
    """One gateway on ``port``: route ``acme/noise`` on provider ``old`` (the control
    server) with candidate ``new``; ``old-again`` is the control's server under a second
    name (a control-vs-control candidate). SQLite in ``tmp``; HTTPS with ``tls``."""
    def cog(server: CogServer) -> dict[str, Any]:
        return {"kind": "cog", "base_url": server.url, "webhook_auth_token": COG_WEBHOOK_TOKEN,
                "max_concurrency": 1}  # one prediction slot per Cog server

    scheme = "https" if tls else "http"
    served = {"tls_cert_file": str(tls.cert_file), "tls_key_file": str(tls.key_file)} if tls else {}
    return {
        "gateway": {
            "listen": f"127.0.0.1:{port}", "public_url": f"{scheme}://127.0.0.1:{port}",
            "database_url": f"sqlite+aiosqlite:///{tmp / 'cutover.db'}",
            "storage_url": (tmp / "assets").as_uri(), "api_tokens": [API_TOKEN],
            "loop_interval_s": 0.05, **served,
        },
        "admin": {"tokens": admin},
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": {"old": cog(cogs["control"]), "new": cog(cogs["candidate"]),
                      "old-again": cog(cogs["control"])},
        "routes": [{
            "model": ROUTE, "provider": "old", "candidate": "new", "baseline_percent": 20,
            "shadow_policy": {"allow_fields": ["prompt", "seed"], "max_input_bytes": 4096},
            "shadow_budget": {"max_concurrent": max_concurrent, "max_per_hour": 5000},
        }],
    }


def record(http: httpx.Client, prompt: str) -> str:
    """One prediction of the route (on its control), waited for; its final status."""
    made = http.post(f"/v1/models/{ROUTE}/predictions", json={"input": {"prompt": prompt}},
                     headers={"Prefer": "wait=30"})
    assert made.status_code in (200, 201), made.text
    body = made.json()

    def done() -> str | None:
        nonlocal body
        if body["status"] in ("succeeded", "failed", "canceled"):
            return str(body["status"])
        body = http.get(f"/v1/predictions/{body['id']}").json()
        return None

    return str(wait_until_sync(done, 60.0, what=f"prediction {body['id']} finished"))


async def record_rows(gateway: GatewayHarness, route: str, count: int, *, imported: int = 0,
                      refused: int = 0) -> list[str]:
    """Store ``count`` finished control predictions of the route (``imported`` of them
    under the model's name, as ``cutover import`` stores them; ``refused`` with an input
    the shadow policy refuses), newest first; their ids come back in that order."""
    now = gateway.clock.now()
    rows, made = [], []
    for i in range(count):
        job_id = ids.new_prediction_id()
        made.append(job_id)
        at = now - timedelta(minutes=i + 1)
        rows.append({
            "id": job_id, "state": JobState.COMPLETED.value, "model": route.partition(":")[0],
            "version": route.partition(":")[2] or "hidden" if i >= imported else "hidden",
            "route": route if i >= imported else route.partition(":")[0], "provider": "fake",
            "input": {"prompt": f"p{i}", **({"seed": 1} if i < refused else {})},
            "output": f"out {i}", "created_at": at, "updated_at": at, "completed_at": at,
            "submitted_at": at, "callback_token": ids.callback_token(), "attempts": 1,
            "adopted": i < imported,
        })
    async with gateway.store.engine.begin() as conn:
        await conn.execute(jobs.insert(), rows)
    return made
