"""Dependency outages: the database and the provider cut and restored mid-run.

The gateway (a ``cutover serve`` process) reaches PostgreSQL and the fake provider
through TCP proxies on 127.0.0.1 that the test starts (tests/support/tcp_proxy.py); the
machine's database server is never touched. While the database is away, API requests
fail fast (within 5 s, the connect timeout) with 503 and ``Retry-After``; nothing in
flight is lost, and work resumes by itself once each dependency is back
(docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import httpx
import pytest

from chaos import check
from chaos import run as chaos_run
from chaos.driver import VERSION, Driver
from chaos.fleet import Fleet
from chaos.profile import FaultProfile
from chaos.provider import FakeProvider
from chaos.receiver import Receiver
from tests.support.databases import BACKENDS, database_url_for
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected"),
]

CALM = FaultProfile(  # no injected faults: the outages are the faults here
    provider_error_ratio=0, webhook_lost_ratio=0.3, webhook_duplicate_ratio=0,
    webhook_late_ratio=0, receiver_failing_ratio=0, cancel_ratio=0, cancel_after_ratio=0,
    client_ratio=0, provider_failed_ratio=0, run_min_s=0.5, run_max_s=3.0,
    max_concurrency=16, in_flight=60, terminal_within_s=120.0,
)
OUTAGE_S = 4.0
FAST_S = 5.0  # PG_CONNECT_TIMEOUT_S: the slowest a refused connect may take to be noticed


async def _probe_while_down(http: httpx.AsyncClient, url: str, some_id: str) -> list[str]:
    """Requests during the database outage; what was wrong with each answer."""
    wrong = []
    end = time.monotonic() + OUTAGE_S
    n = 0
    while time.monotonic() < end:
        n += 1
        for method, path, body in (
            ("POST", "/v1/predictions", {"version": VERSION, "input": {"kind": "text"}}),
            ("GET", f"/v1/predictions/{some_id}", None),
            ("GET", "/v1/predictions", None),
        ):
            started = time.monotonic()
            response = await http.request(method, url + path, json=body,
                                          headers={"Idempotency-Key": f"probe-{n}"})
            took = time.monotonic() - started
            if response.status_code != 503 or "retry-after" not in response.headers:
                wrong.append(f"{method} {path}: {response.status_code}")
            elif took > FAST_S:
                wrong.append(f"{method} {path}: 503 after {took:.1f} s")
        # the probes' pace across the outage (a round every 0.2 s, for its whole length),
        # not a wait for anything: what is checked is each answer while the database is away
        await asyncio.sleep(0.2)
    return wrong


async def test_database_and_provider_outages_lose_nothing_and_heal_by_themselves(
    tmp_path: Path,
) -> None:
    keys = chaos_run.Secrets()
    options = chaos_run.Options(workdir=tmp_path, predictions=60, profile=CALM, seed=4)
    provider = FakeProvider(CALM, secret=keys.provider_secret, rng=random.Random(4))
    receiver = Receiver(keys.signing_secret)
    async with (
        database_url_for("postgres", tmp_path) as direct_url,
        TcpProxy("127.0.0.1", 5432) as database,
        chaos_run.serve(provider.app()) as provider_url,
        chaos_run.serve(receiver.app()) as hooks,
    ):
        provider_port = int(provider_url.rsplit(":", 1)[1])
        async with TcpProxy("127.0.0.1", provider_port) as upstream:
            url = direct_url.replace("127.0.0.1:5432", f"127.0.0.1:{database.port}")
            config = chaos_run.gateway_config(
                options, keys, f"http://127.0.0.1:{upstream.port}", url
            )
            fleet = Fleet(config, tmp_path, 1)
            await fleet.start()
            driver = Driver(urls=fleet.urls, token=keys.api_token, hooks_url=f"{hooks}/hooks",
                            profile=CALM, rng=random.Random(5))
            auth = {"Authorization": f"Bearer {keys.api_token}"}
            try:
                work = asyncio.create_task(driver.run(options.predictions, "outage"))
                await wait_until(lambda: len(provider.jobs) >= 10, 60, interval_s=0.05)
                some_id = next(iter(provider.jobs))
                database.cut()
                async with httpx.AsyncClient(timeout=30, headers=auth) as http:
                    wrong = await _probe_while_down(http, fleet.urls[0], some_id)
                database.restore()
                # dispatching again
                await wait_until(lambda: len(provider.jobs) >= 30, 60, interval_s=0.05)
                upstream.cut()
                await asyncio.sleep(OUTAGE_S)  # the outage itself: its length is the point
                upstream.restore()
                tracked = await work
                await chaos_run.settle(tracked, receiver, CALM)
                report = await chaos_run.build_report(
                    options, tracked, provider, receiver, fleet, time.monotonic()
                )
            finally:
                await driver.aclose()
                await fleet.stop()
    assert database.cut_connections > 0 and upstream.refused + upstream.cut_connections > 0
    assert wrong == [], wrong[:10]
    assert [v.line() for v in report.violations] == []
    assert report.statuses["succeeded"] == options.predictions
    assert check.check_logs(fleet.log_text(), keys.all(), set()) == []
