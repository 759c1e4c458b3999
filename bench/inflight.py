"""10,000 jobs in flight: what the gateway costs while it waits for them.

Starts ``cutover serve`` (SQLite, every background loop running) in front of the in-memory
fake provider, which accepts every job and never finishes one, creates ``--jobs``
predictions, waits until every one is submitted, then measures the gateway's CPU (% of
one core) over ``--seconds`` and its resident memory, in two modes, one after the other
on the same database:

* ``polled``: the provider is polled every 30 s per job (``fetch_interval_s`` =
  ``fetch_max_interval_s`` = 30: each job is due 15-45 s after its last check);
* ``webhooks``: the gateway restarted with the provider's webhooks awaited (the watchdog
  interval an hour, every job's next probe moved 30 minutes ahead: nothing is polled in
  the window).

First, the GET of one in-flight prediction (what ``wait()`` and ``reload()`` poll) against
the bare aiohttp server answering the same bytes, per backend, alternating rounds (wrk,
closed loop, a second of each first unmeasured, then ABBA rounds;
:func:`bench.ratios.inflight_gets`, which ``bench/ratios.py`` runs too), with issue 23's
targets (0.50 of the bare server on SQLite, 0.40 on PostgreSQL) on requests/s, and the
ratio of CPU time per request beside it.

    .venv/bin/python bench/inflight.py [--jobs 10000] [--seconds 60]
        [--parts gets,cpu] [--backends sqlite,postgres] [--rounds 3] [--get-seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ratios import AUTH, CREATE_BODY, gateway_config, inflight_gets
from bench.startup import cpu_s, rss_mib
from bench.support import load
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess

MODES = {"polled": 30.0, "webhooks": 3600.0}  # the provider's fetch interval, seconds
GET_TARGETS = {"sqlite": 0.50, "postgres": 0.40}  # of the bare server (issue 23)


def gets(args: argparse.Namespace) -> list[str]:
    """The in-flight GET against the bare server, per backend: summary and target lines."""
    lines = []
    wrk = argparse.Namespace(seconds=args.get_seconds, connections=32, rounds=args.rounds)
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as tmp, sync_database(backend, Path(tmp)) as url:
            work = Path(tmp)
            gateway = GatewayProcess(gateway_config(url, work), work).start()
            try:
                created = httpx.post(f"{gateway.url}/v1/predictions", json=CREATE_BODY,
                                     headers=AUTH, timeout=30).json()
                summary = inflight_gets(gateway, backend, created["id"], work, wrk)
            finally:
                gateway.stop()
        ratio = float(summary.split("ratio median ")[1].split()[0])
        cpu = summary.partition("cpu/req ratio median ")[2]
        target = GET_TARGETS.get(backend, 0.0)
        lines += [summary, f"{backend} GET in flight target >= {target:.2f} of bare: "
                  f"{'met' if ratio >= target else 'NOT met'} ({ratio:.3f}"
                  f"{f'; by CPU per request {cpu}' if cpu else ''})"]
        print("  " + lines[-1], flush=True)
    return lines


async def create(url: str, jobs: int, concurrency: int = 16) -> None:
    """``jobs`` creates, ``concurrency`` at a time."""
    left = iter(range(jobs))

    async def worker(http: httpx.AsyncClient) -> None:
        for _ in left:
            for attempt in range(20):
                response = await http.post(f"{url}/v1/predictions", json=CREATE_BODY)
                if response.status_code == 201:
                    break
                await asyncio.sleep(0.1 * (attempt + 1))
            else:
                raise RuntimeError(f"create failed: {response.status_code} {response.text}")

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(headers=AUTH, timeout=60, limits=limits) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))


def submitted(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        query = "SELECT count(*) FROM jobs WHERE submitted_at IS NOT NULL"
        return int(conn.execute(query).fetchone()[0])


def schedule(db: Path) -> dict[str, str]:
    """Each job's next check time (a poll moves it on): to count the polls in a window."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return dict(conn.execute("SELECT id, next_attempt_at FROM jobs").fetchall())


def window(gateway: GatewayProcess, db: Path, seconds: float) -> tuple[float, float, int]:
    """(% of one core, RSS MiB, jobs polled) of ``gateway`` over ``seconds``."""
    pid = gateway._proc.pid  # type: ignore[union-attr]
    plan, before, t0 = schedule(db), cpu_s(pid), time.perf_counter()
    time.sleep(seconds)
    busy = 100 * (cpu_s(pid) - before) / (time.perf_counter() - t0)
    polled = sum(1 for k, v in schedule(db).items() if plan.get(k) != v)
    return busy, rss_mib(pid), polled


def measure(jobs: int, seconds: float) -> dict[str, tuple[float, float, int]]:
    """Both modes on one database: ``jobs`` created and submitted by a gateway polling
    every 30 s (measured), then the same gateway restarted waiting for webhooks (every
    job's watchdog moved an hour ahead, as its interval would put it; measured)."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="perf-io-inflight-") as tmp:
        work = Path(tmp)
        db = work / "cutover.db"
        config = gateway_config(f"sqlite+aiosqlite:///{db}", work)
        config["gateway"]["max_job_lifetime_s"] = 24 * 3600
        for mode, interval in MODES.items():
            config["providers"]["fake"].update(fetch_interval_s=interval,
                                               fetch_max_interval_s=interval)
            if mode == "webhooks":
                with contextlib.closing(sqlite3.connect(db)) as conn, conn:
                    conn.execute("UPDATE jobs SET next_attempt_at = "
                                 "datetime('now', '+1800 seconds') WHERE submitted_at IS NOT NULL")
            gateway = GatewayProcess(config, work).start()
            try:
                if mode == "polled":
                    start = time.perf_counter()
                    asyncio.run(create(gateway.url, jobs))
                    while submitted(db) < jobs:
                        time.sleep(0.5)
                    print(f"  {jobs} jobs created and submitted in "
                          f"{time.perf_counter() - start:.0f} s", flush=True)
                time.sleep(5)  # start-up and the submit wave's writes settle
                results[mode] = window(gateway, db, seconds)
            finally:
                gateway.stop()
            busy, rss, polled = results[mode]
            load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"  {mode}: {busy:.1f} % of a core over {seconds:.0f} s, RSS {rss:.0f} MiB, "
                  f"{polled} jobs polled (load {load_avg})", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--parts", default="gets,cpu", help="gets (GET vs bare), cpu")
    parser.add_argument("--backends", default="sqlite,postgres", help="for the GET part")
    parser.add_argument("--rounds", type=int, default=3, help="GET rounds per backend")
    parser.add_argument("--get-seconds", type=float, default=5, help="wrk seconds a round")
    args = parser.parse_args()
    load.print_header()
    lines = gets(args) if "gets" in args.parts else []
    results = measure(args.jobs, args.seconds) if "cpu" in args.parts else {}
    print("== summary")
    for line in lines:
        print(line)
    for mode, (busy, rss, polled) in results.items():
        print(f"{args.jobs} jobs in flight, {mode:8}  {busy:5.1f} % of a core, RSS {rss:.0f} MiB "
              f"({polled} polled in {args.seconds:.0f} s)")


if __name__ == "__main__":
    main()
