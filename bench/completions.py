"""Provider completion -> the app's ``completed`` webhook: latency and sustained rate.

Starts ``cutover serve`` (SQLite by default; a fake provider that accepts every job and
is never polled) and a receiving app (an aiohttp server on 127.0.0.1). Creates
predictions with a ``completed``-only webhook to the app, waits until they are submitted,
then sends the fake provider's signed completion webhooks at a fixed rate and records,
per prediction, the time from sending the provider's webhook to the app receiving its
``completed`` webhook. Prints p50/p99 latency, and the rate at which completions reached
the app against the rate they were sent (a chain that keeps up delivers at the sent rate).

    .venv/bin/python bench/completions.py [--rates 100,300] [--seconds 5] [--backend sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import asyncpg
import httpx
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ratios import AUTH, FAKE_SECRET, gateway_config
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess, free_port


class App:
    """The receiving app: records when each prediction's ``completed`` webhook arrives."""

    def __init__(self) -> None:
        self.port = free_port()
        self.arrived: dict[str, float] = {}
        self._expected: set[str] = set()
        self._done = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/hook", self._hook)

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("status") == "succeeded":
            self.arrived.setdefault(body["id"], time.perf_counter())
            if self._expected <= self.arrived.keys():
                self._done.set()
        return web.Response(text="ok")

    async def all_arrived(self, ids: set[str]) -> None:
        self._expected, self._done = ids, asyncio.Event()
        if ids <= self.arrived.keys():
            return
        await self._done.wait()


async def tokens(database_url: str, ids: list[str]) -> dict[str, str]:
    """The callback tokens of the submitted jobs among ``ids``."""
    query = "SELECT id, callback_token FROM jobs WHERE submitted_at IS NOT NULL"
    if database_url.startswith("sqlite"):
        path = database_url.split(":///", 1)[1]
        with contextlib.closing(sqlite3.connect(path)) as conn:
            found = dict(conn.execute(query).fetchall())
    else:
        dsn = database_url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            found = {r["id"]: r["callback_token"] for r in await conn.fetch(query)}
        finally:
            await conn.close()
    return {i: found[i] for i in ids if i in found}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_rate(gateway: GatewayProcess, url: str, app: App, rate: int, seconds: float
                   ) -> str:
    count = int(rate * seconds)
    hook = {"webhook": f"http://127.0.0.1:{app.port}/hook", "webhook_events_filter": ["completed"]}
    body = {"version": "bench/echo", "input": {"prompt": "hi"}, **hook}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(headers=AUTH, timeout=60, limits=limits) as http:
        ids: list[str] = []
        for start in range(0, count, 64):
            batch = [http.post(f"{gateway.url}/v1/predictions", json=body)
                     for _ in range(min(64, count - start))]
            ids += [r.json()["id"] for r in await asyncio.gather(*batch)]
        secret = await tokens(url, ids)
        while len(secret) < len(ids):  # the dispatcher submits them all first
            await asyncio.sleep(0.2)
            secret = await tokens(url, ids)
        cpu_before = cpu_s(gateway.pid)
        sent: dict[str, float] = {}

        # The provider's side sends through aiohttp: httpx's pool costs the sender more
        # CPU per request than the gateway spends on it, and the sender set the pace.
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as provider:

            async def complete(job_id: str) -> None:
                event = json.dumps({"id": f"fake-{job_id}", "status": "completed",
                                    "output": "ok"}).encode()
                signature = hmac.new(FAKE_SECRET, event, hashlib.sha256).hexdigest()
                sent[job_id] = time.perf_counter()
                url = f"{gateway.url}/provider-webhooks/fake/{job_id}/{secret[job_id]}"
                async with provider.post(url, data=event,
                                         headers={"x-fake-signature": signature}) as answer:
                    await answer.read()

            begin = time.perf_counter()
            tasks = []
            for n, job_id in enumerate(ids):
                delay = begin + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(complete(job_id)))
            await asyncio.gather(*tasks)
            sent_rate = count / (time.perf_counter() - begin)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(app.all_arrived(set(ids)), 60)
    cpu_ms = 1000 * (cpu_s(gateway.pid) - cpu_before) / count
    got = [app.arrived[i] - sent[i] for i in ids if i in app.arrived]
    got.sort()
    last = max((app.arrived[i] for i in ids if i in app.arrived), default=begin)
    delivered_rate = len(got) / (last - begin) if got else 0.0
    p = (lambda q: 1000 * got[min(len(got) - 1, int(len(got) * q))]) if got else (lambda q: 0)
    return (f"{rate:5d}/s asked, {sent_rate:6.0f}/s sent, {delivered_rate:6.0f}/s delivered "
            f"({len(got)}/{count});  latency p50 {p(0.5):8.1f} ms  p99 {p(0.99):8.1f} ms;  "
            f"gateway CPU {cpu_ms:.2f} ms/completion")


async def main_async(args: argparse.Namespace) -> list[str]:
    app = App()
    runner = web.AppRunner(app.app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", app.port).start()
    lines = []
    try:
        with tempfile.TemporaryDirectory() as tmp, sync_database(args.backend, Path(tmp)) as url:
            config = gateway_config(url, Path(tmp))
            config["webhooks"] = {"allow_hosts": ["127.0.0.1"]}
            gateway = GatewayProcess(config, Path(tmp)).start()
            try:
                for rate in (int(r) for r in args.rates.split(",")):
                    line = await run_rate(gateway, url, app, rate, args.seconds)
                    print(f"  {args.backend} {line}", flush=True)
                    lines.append(f"{args.backend} completion -> webhook {line}")
            finally:
                gateway.stop()
    finally:
        await runner.cleanup()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,300")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--backend", default="sqlite")
    args = parser.parse_args()
    print("command:", " ".join(["python", *sys.argv]))
    load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"{len(os.sched_getaffinity(0))} cores, load average before {load_avg}", flush=True)
    lines = asyncio.run(main_async(args))
    print("== summary")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
