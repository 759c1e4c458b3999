"""Thousands of callers polling their predictions every 0.5 s while the provider finishes
them by webhook: what ``wait()`` and ``reload()`` do at scale (issue 23).

Per backend, ``cutover serve`` (every loop running; the fake provider accepts every job
and is never polled) and N callers in this process (aiohttp, one connection each). Each
caller polls ``GET /v1/predictions/{id}`` of its current prediction on a fixed 0.5 s
schedule (a tick whose previous poll is still out is offered but not served); the
"provider" sends each prediction's signed completion webhook ``--run-s`` seconds after its
caller began polling it (plus up to 0.5 s at random, so it falls anywhere between two
polls); a caller that sees ``succeeded`` moves to its next prediction
(all created before the window). Prints, over the window: the share of offered polls
served, poll p50/p99, errors, the lag from the completion webhook being sent to its caller
seeing the prediction finished (p99, max, how many over 1 s or never), and the provider
webhook -> applied p99 (the terminal row's ``updated_at`` minus the send time; one clock).

    .venv/bin/python bench/pollers.py [--callers sqlite=2000,postgres=1000] [--seconds 20]
        [--run-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import random
import sqlite3
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.completions import quantile, submitted
from bench.ratios import AUTH, FAKE_SECRET, gateway_config
from bench.startup import cpu_s
from bench.support import load
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess

INTERVAL_S = 0.5  # the replicate clients' poll interval
TARGETS = {"served": 0.95, "p99_ms": 50.0, "lag_s": 1.0, "applied_p99_ms": 100.0}


class Run:
    """Counters of one window."""

    def __init__(self) -> None:
        self.offered = self.served = self.errors = 0
        self.latencies: list[float] = []
        self.sent: dict[str, float] = {}  # id -> perf_counter at the completion webhook
        self.sent_wall: dict[str, float] = {}
        self.seen: dict[str, float] = {}
        self.hook_errors = 0
        self.stop = False


async def complete(http: aiohttp.ClientSession, base: str, job_id: str, token: str,
                   run: Run) -> None:
    if run.stop:  # due after the window: not sent (its session is closing)
        return
    event = json.dumps({"id": f"fake-{job_id}", "status": "completed", "output": "ok"}).encode()
    signature = hmac.new(FAKE_SECRET, event, hashlib.sha256).hexdigest()
    run.sent[job_id], run.sent_wall[job_id] = time.perf_counter(), time.time()
    try:
        async with http.post(f"{base}/provider-webhooks/fake/{job_id}/{token}", data=event,
                             headers={"x-fake-signature": signature},
                             timeout=aiohttp.ClientTimeout(total=10)) as answer:
            await answer.read()
            if answer.status != 200:
                run.hook_errors += 1
    except (aiohttp.ClientError, TimeoutError):
        run.hook_errors += 1


async def caller(base: str, mine: list[tuple[str, str]], run: Run, run_s: float,
                 provider: aiohttp.ClientSession, hooks: set[asyncio.Task[None]]) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector, headers=AUTH) as http:
        await asyncio.sleep(random.uniform(0, INTERVAL_S))
        tick = time.perf_counter()
        pending: asyncio.Task[None] | None = None
        current = 0

        def start(index: int) -> None:
            job_id, token = mine[index]
            loop = asyncio.get_running_loop()
            after = run_s + random.uniform(0, INTERVAL_S)
            loop.call_later(after, lambda: hooks.add(loop.create_task(
                complete(provider, base, job_id, token, run))))

        async def poll(job_id: str) -> None:
            nonlocal current
            began = time.perf_counter()
            try:
                async with http.get(f"{base}/v1/predictions/{job_id}") as response:
                    body = await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if not ok:
                run.errors += 1
                return
            run.served += 1
            run.latencies.append(time.perf_counter() - began)
            if b'"status":"succeeded"' in body and job_id not in run.seen:
                run.seen[job_id] = time.perf_counter()
                if current + 1 < len(mine):
                    current += 1
                    start(current)

        start(0)
        while not run.stop:
            run.offered += 1
            if pending is None or pending.done():
                pending = asyncio.create_task(poll(mine[current][0]))
            tick += INTERVAL_S
            await asyncio.sleep(max(0.0, tick - time.perf_counter()))
        if pending is not None:
            await pending


async def applied_at(database_url: str, ids: list[str]) -> dict[str, float]:
    """The terminal rows' ``updated_at`` (epoch seconds) of ``ids`` that succeeded
    (state ``completed``)."""
    query = "SELECT id, updated_at FROM jobs WHERE state = 'completed'"
    if database_url.startswith("sqlite"):
        path = database_url.split(":///", 1)[1]
        with contextlib.closing(sqlite3.connect(path)) as conn:
            rows = conn.execute(query).fetchall()
        found = {i: datetime.fromisoformat(at + "+00:00").timestamp() for i, at in rows}
    else:
        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://",
                                                          "postgresql://"))
        try:
            found = {r["id"]: r["updated_at"].timestamp() for r in await conn.fetch(query)}
        finally:
            await conn.close()
    wanted = set(ids)
    return {i: at for i, at in found.items() if i in wanted}


async def measure(backend: str, callers: int, args: argparse.Namespace) -> list[str]:
    per_caller = int(args.seconds / (args.run_s + INTERVAL_S)) + 2
    with tempfile.TemporaryDirectory() as tmp, sync_database(backend, Path(tmp)) as url:
        gateway = GatewayProcess(gateway_config(url, Path(tmp)), Path(tmp)).start()
        try:
            began = time.perf_counter()
            tokens = await submitted(gateway, url, None, callers * per_caller)
            print(f"  {backend}: {len(tokens)} predictions created and submitted in "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
            pairs = list(tokens.items())
            run, hooks = Run(), set[asyncio.Task[None]]()
            provider = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
            async with provider:
                cpu_before, wall = cpu_s(gateway.pid), time.perf_counter()
                tasks = [asyncio.create_task(caller(
                    gateway.url, pairs[n * per_caller:(n + 1) * per_caller], run, args.run_s,
                    provider, hooks)) for n in range(callers)]
                await asyncio.sleep(args.seconds)
                run.stop = True
                end = time.perf_counter()
                await asyncio.gather(*tasks)
                await asyncio.gather(*hooks)
                busy = 100 * (cpu_s(gateway.pid) - cpu_before) / (time.perf_counter() - wall)
            applied = await applied_at(url, list(run.sent))
        finally:
            gateway.stop()
    due = [i for i, at in run.sent.items() if at < end - TARGETS["lag_s"]]
    lags = [run.seen[i] - run.sent[i] for i in due if i in run.seen]
    late = sum(1 for i in due if i not in run.seen or run.seen[i] - run.sent[i] > 1.0)
    never = sum(1 for i in due if i not in run.seen)
    to_apply = [applied[i] - run.sent_wall[i] for i in run.sent if i in applied]
    share = run.served / run.offered if run.offered else 0.0
    p99, applied_p99 = quantile(run.latencies, 0.99), quantile(to_apply, 0.99)
    rate = run.served / args.seconds
    lines = [
        f"{backend} {callers} callers at 0.5 s: polls served {share:.1%} of {run.offered} "
        f"offered ({rate:.0f}/s), p50 {quantile(run.latencies, 0.5):.1f} ms p99 {p99:.1f} ms, "
        f"errors {run.errors}; gateway {busy:.0f} % of a core",
        f"{backend} {callers} callers: seen finished after the completion webhook p50 "
        f"{quantile(lags, 0.5):.0f} ms p99 {quantile(lags, 0.99):.0f} ms max "
        f"{1000 * max(lags, default=0):.0f} ms; {late} of {len(due)} over 1 s ({never} never); "
        f"provider webhook -> applied p99 {applied_p99:.1f} ms ({run.hook_errors} webhook errors)",
        f"{backend} {callers} callers: targets served >= 95 % "
        f"{'met' if share >= TARGETS['served'] else 'NOT met'}, p99 <= 50 ms "
        f"{'met' if p99 <= TARGETS['p99_ms'] and not run.errors else 'NOT met'}, every one seen "
        f"within 1 s {'met' if due and not late else 'NOT met'}, applied p99 <= 100 ms "
        f"{'met' if to_apply and applied_p99 <= TARGETS['applied_p99_ms'] else 'NOT met'}",
    ]
    for line in lines:
        print("  " + line, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", default="sqlite=2000,postgres=1000",
                        help="backend=callers, comma-separated")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--run-s", type=float, default=3.0,
                        help="seconds from a caller's first poll to its completion webhook")
    args = parser.parse_args()
    load.print_header()
    lines: list[str] = []
    for part in args.callers.split(","):
        backend, _, count = part.partition("=")
        lines += asyncio.run(measure(backend, int(count), args))
    print("== summary")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
