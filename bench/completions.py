"""Provider completion -> the app's ``completed`` webhook: latency and sustained rate.

Starts ``cutover serve`` (SQLite by default; a fake provider that accepts every job and
is never polled) and a receiving app (an aiohttp server on 127.0.0.1). Creates
predictions with a ``completed``-only webhook to the app, waits until they are submitted,
then sends the fake provider's signed completion webhooks at a fixed rate and records,
per prediction, the time from sending the provider's webhook to the app receiving its
``completed`` webhook. Prints p50/p99 latency, the rate at which completions reached
the app against the rate they were sent (a chain that keeps up delivers at the sent rate),
and the gateway process's CPU time per completion (``/proc/PID/stat``, from the first
completion sent to the last webhook received). ``--sequential N`` then sends N more one
at a time, each once the previous one's webhook arrived: latency and CPU per completion
without batching or queueing, the figure that moves least with the machine's load.

    .venv/bin/python bench/completions.py [--rates 100,300] [--seconds 5] [--backend sqlite]
        [--sequential 200]   (default 200; 0: none)
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


async def submitted(gateway: GatewayProcess, url: str, app: App | None, count: int
                    ) -> dict[str, str]:
    """``count`` new predictions with a ``completed`` webhook to ``app`` (None: no
    webhook), once the dispatcher has submitted them all: id -> callback token, in
    creation order."""
    hook = {} if app is None else {
        "webhook": f"http://127.0.0.1:{app.port}/hook", "webhook_events_filter": ["completed"]}
    body = {"version": "bench/echo", "input": {"prompt": "hi"}, **hook}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(headers=AUTH, timeout=60, limits=limits) as http:
        ids: list[str] = []
        for start in range(0, count, 64):
            batch = [http.post(f"{gateway.url}/v1/predictions", json=body)
                     for _ in range(min(64, count - start))]
            ids += [r.json()["id"] for r in await asyncio.gather(*batch)]
    secret = await tokens(url, ids)
    while len(secret) < len(ids):
        await asyncio.sleep(0.2)
        secret = await tokens(url, ids)
    return secret


class Provider:
    """The fake provider's side: its signed completion webhooks, sent through aiohttp
    (httpx's pool costs the sender more CPU per request than the gateway spends on it,
    and the sender set the pace)."""

    def __init__(self, gateway: GatewayProcess, secret: dict[str, str]) -> None:
        self.gateway, self.secret = gateway, secret
        self.sent: dict[str, float] = {}
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))

    async def complete(self, job_id: str) -> None:
        event = json.dumps({"id": f"fake-{job_id}", "status": "completed",
                            "output": "ok"}).encode()
        signature = hmac.new(FAKE_SECRET, event, hashlib.sha256).hexdigest()
        self.sent[job_id] = time.perf_counter()
        url = f"{self.gateway.url}/provider-webhooks/fake/{job_id}/{self.secret[job_id]}"
        async with self.session.post(url, data=event,
                                     headers={"x-fake-signature": signature}) as answer:
            await answer.read()


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds) in ms; 0 when there are none."""
    got = sorted(values)
    return 1000 * got[min(len(got) - 1, int(len(got) * q))] if got else 0.0


async def run_rate(gateway: GatewayProcess, url: str, app: App, rate: int, seconds: float
                   ) -> str:
    count = int(rate * seconds)
    secret = await submitted(gateway, url, app, count)
    ids = list(secret)
    cpu_before = cpu_s(gateway.pid)
    provider = Provider(gateway, secret)
    async with provider.session:
        begin = time.perf_counter()
        tasks = []
        for n, job_id in enumerate(ids):
            delay = begin + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(provider.complete(job_id)))
        await asyncio.gather(*tasks)
        sent_rate = count / (time.perf_counter() - begin)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(app.all_arrived(set(ids)), 60)
    cpu_ms = 1000 * (cpu_s(gateway.pid) - cpu_before) / count
    got = [app.arrived[i] - provider.sent[i] for i in ids if i in app.arrived]
    last = max((app.arrived[i] for i in ids if i in app.arrived), default=begin)
    delivered_rate = len(got) / (last - begin) if got else 0.0
    return (f"{rate:5d}/s asked, {sent_rate:6.0f}/s sent, {delivered_rate:6.0f}/s delivered "
            f"({len(got)}/{count});  latency p50 {quantile(got, 0.5):8.1f} ms  "
            f"p99 {quantile(got, 0.99):8.1f} ms;  gateway CPU {cpu_ms:.2f} ms/completion")


async def run_sequential(gateway: GatewayProcess, url: str, app: App, count: int) -> str:
    """``count`` completions one at a time (after 20 unmeasured ones), each sent once the
    previous one's webhook arrived: the chain's own latency and CPU per completion, with
    no batching and no queueing (the figure least moved by the machine's load)."""
    secret = await submitted(gateway, url, app, count + 20)
    ids = list(secret)
    provider = Provider(gateway, secret)
    async with provider.session:
        for job_id in ids[:20]:
            await provider.complete(job_id)
            await app.all_arrived({job_id})
        cpu_before = cpu_s(gateway.pid)
        for job_id in ids[20:]:
            await provider.complete(job_id)
            await app.all_arrived({job_id})
        cpu_ms = 1000 * (cpu_s(gateway.pid) - cpu_before) / count
    got = [app.arrived[i] - provider.sent[i] for i in ids[20:]]
    return (f"{count:5d} one at a time;  latency p50 {quantile(got, 0.5):8.1f} ms  "
            f"p99 {quantile(got, 0.99):8.1f} ms;  gateway CPU {cpu_ms:.2f} ms/completion")


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
                for rate in (int(r) for r in args.rates.split(",") if r):
                    line = await run_rate(gateway, url, app, rate, args.seconds)
                    print(f"  {args.backend} {line}", flush=True)
                    lines.append(f"{args.backend} completion -> webhook {line}")
                if args.sequential:
                    line = await run_sequential(gateway, url, app, args.sequential)
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
    parser.add_argument("--sequential", type=int, default=200,
                        help="then this many completions one at a time (0: none)")
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
