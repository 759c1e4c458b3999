"""The gateway against its reference programs, side by side, in alternating rounds.

For each backend (SQLite, PostgreSQL) this starts ``cutover serve`` (plain HTTP, every
background loop running, a fake provider that accepts every job at once and is never
polled), and beside it the reference programs (bench/support/refs.py):

* GET of one finished prediction, gateway vs the bare aiohttp server answering the
  gateway's own bytes for it (wrk, closed loop): ratio of requests/s;
* the same GET at a fixed 200 requests/s (hey): added p50 and p99 latency in ms;
* GET of one in-flight prediction (what ``wait()`` and ``reload()`` poll), vs the bare
  server answering its bytes: ratio of requests/s; the list (a page of 100): absolute;
* create (POST /v1/predictions, dispatched to the fake provider in the same process), vs
  the FastAPI + Celery + PostgreSQL peer's POST /jobs: ratio of requests/s.

Each round runs the gateway and its reference one after the other; the ratio of every
round and the median of the rounds are printed, with the command and the machine. GET and
create rounds also print the server process's CPU time per request (``cpu/req``, from
``/proc``; the bare server's too): on a shared machine throughput is partly the
scheduler's, CPU per request is the figure to compare between runs.

    .venv/bin/python bench/ratios.py [--rounds 3] [--seconds 5] [--connections 32]
        [--backends sqlite,postgres] [--no-peer] [--parts get,latency,reads,create]
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
from collections.abc import Callable
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support import load, refs
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess, free_port

TOKEN = "r8_bench"  # a local benchmark value, not a credential
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAKE_SECRET = b"fake-secret"  # the fake provider's default webhook key (adapters/fake.py)
CREATE_BODY = {"version": "bench/echo", "input": {"prompt": "hello"}}
POST_LUA = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


def gateway_config(database_url: str, workdir: Path) -> dict:
    port = free_port()
    return {
        "gateway": {
            "listen": f"127.0.0.1:{port}",
            "public_url": f"http://127.0.0.1:{port}",
            "database_url": database_url,
            "storage_url": f"file://{workdir / 'assets'}",
            "api_tokens": [TOKEN],
        },
        "providers": {
            "fake": {
                "kind": "fake",
                "max_concurrency": 1_000_000,
                "fetch_interval_s": 3600,
                "fetch_max_interval_s": 3600,
            }
        },
        "routes": [{"model": "bench/echo", "provider": "fake"}],
    }


def callback_token(database_url: str, job_id: str) -> str:
    """The job's callback token, read straight from the store."""
    query = "SELECT callback_token FROM jobs WHERE id = "
    if database_url.startswith("sqlite"):
        path = database_url.split(":///", 1)[1]
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return str(conn.execute(query + "?", (job_id,)).fetchone()[0])

    async def read() -> str:
        dsn = database_url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            return str(await conn.fetchval(query + "$1", job_id))
        finally:
            await conn.close()

    return asyncio.run(read())


def finished_prediction(gateway: GatewayProcess, database_url: str, http: httpx.Client) -> str:
    """Create a prediction and complete it with a signed fake-provider webhook; its id."""
    job_id = http.post(f"{gateway.url}/v1/predictions", json=CREATE_BODY).json()["id"]
    event = {"id": f"fake-{job_id}", "status": "completed", "output": "hello, world",
             "logs": "predicting\ndone\n"}
    body = json.dumps(event).encode()
    signature = hmac.new(FAKE_SECRET, body, hashlib.sha256).hexdigest()
    token = callback_token(database_url, job_id)
    url = f"{gateway.url}/provider-webhooks/fake/{job_id}/{token}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        http.post(url, content=body, headers={"x-fake-signature": signature})
        if http.get(f"{gateway.url}/v1/predictions/{job_id}").json()["status"] == "succeeded":
            return job_id
        time.sleep(0.1)
    raise RuntimeError(f"prediction {job_id} did not finish")


class Rounds:
    """Alternating measurements of a subject and its reference, and their ratios: of
    requests/s, and, when both measured their CPU time per request, of that (the
    reference's over the subject's: what one core would serve of each, the figure the
    machine's load moves least)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.ratios: list[float] = []
        self.cpu_ratios: list[float] = []

    def round(self, n: int, subject: load.Result, reference: load.Result) -> None:
        ratio = subject.rate / reference.rate if reference.rate else float("nan")
        self.ratios.append(ratio)
        cpu = ""
        if subject.cpu_us and reference.cpu_us:
            self.cpu_ratios.append(reference.cpu_us / subject.cpu_us)
            cpu = f"  cpu ratio {self.cpu_ratios[-1]:.3f}"
        print(f"  round {n} {self.label:32} gateway {subject.line()}")
        print(f"  round {n} {'':32} ref     {reference.line()}   ratio {ratio:.3f}{cpu}",
              flush=True)

    def summary(self) -> str:
        rounds = " ".join(f"{r:.3f}" for r in self.ratios)
        cpu = (f"; cpu/req ratio median {load.median(self.cpu_ratios):.3f}"
               if self.cpu_ratios else "")
        return (f"{self.label:32} ratio median {load.median(self.ratios):.3f}  "
                f"(rounds {rounds}){cpu}")


def added_latency(gateway_url: str, bare_url: str, rounds: int, seconds: float) -> str:
    """Added p50/p99 (ms) of the gateway over the bare server at 200 requests/s."""
    p50s, p99s = [], []
    for n in range(1, rounds + 1):
        sub = load.hey(gateway_url, rate=200, seconds=seconds, headers=AUTH)
        ref = load.hey(bare_url, rate=200, seconds=seconds, headers=AUTH)
        p50s.append(sub.p50_ms - ref.p50_ms)
        p99s.append(sub.p99_ms - ref.p99_ms)
        print(f"  round {n} GET at 200 req/s              gateway {sub.line()}")
        print(f"  round {n} {'':32} ref     {ref.line()}   "
              f"added p50 {p50s[-1]:+.2f} ms p99 {p99s[-1]:+.2f} ms", flush=True)
    return (f"{'GET at 200 req/s, added':32} p50 {load.median(p50s):+.2f} ms  "
            f"p99 {load.median(p99s):+.2f} ms (medians)")


def inflight_gets(gateway: GatewayProcess, backend: str, job_id: str, work: Path,
                  args: argparse.Namespace) -> str:
    """GET of an in-flight prediction (what ``wait()`` and ``reload()`` poll) against the
    bare server answering the same bytes, with CPU per request: one unmeasured second of
    each, then ``args.rounds`` ABBA rounds (bench/inflight.py and the ``reads`` part here
    run this same function; docs/benchmarks.md says why their figures of one run differ)."""
    wrk_args = {"seconds": args.seconds, "connections": args.connections, "headers": AUTH}
    url = f"{gateway.url}/v1/predictions/{job_id}"
    body_file = work / "running.json"
    body_file.write_bytes(httpx.get(url, headers=AUTH).content)
    gets = Rounds(f"{backend} GET in flight vs bare")
    with refs.bare_server(body_file) as bare:
        bare_url = f"{bare.url}/v1/predictions/{job_id}"
        for warm in (url, bare_url):  # unmeasured: both past their first requests
            load.wrk(warm, **{**wrk_args, "seconds": 1})
        for n in range(1, args.rounds + 1):
            # ABBA: the gateway first in odd rounds, the bare server in even ones, so a
            # drift of the machine's load over the rounds weighs on both alike.
            first, second = (url, gateway.pid), (bare_url, bare.proc.pid)
            if n % 2 == 0:
                first, second = second, first
            done = {target: load.with_cpu(pid, args.seconds,
                                          lambda t=target: load.wrk(t, **wrk_args))
                    for target, pid in (first, second)}
            gets.round(n, done[url], done[bare_url])
    return gets.summary()


def run_backend(backend: str, args: argparse.Namespace, peer: refs.Server | None) -> list[str]:
    summaries = []
    wrk_args = {"seconds": args.seconds, "connections": args.connections, "headers": AUTH}
    with tempfile.TemporaryDirectory() as tmp, sync_database(backend, Path(tmp)) as url:
        work = Path(tmp)
        gateway = GatewayProcess(gateway_config(url, work), work).start()
        try:
            with httpx.Client(headers=AUTH, timeout=30) as http:
                done = finished_prediction(gateway, url, http)
                running = http.post(f"{gateway.url}/v1/predictions", json=CREATE_BODY).json()
                body = http.get(f"{gateway.url}/v1/predictions/{done}").content
            body_file = work / "prediction.json"
            body_file.write_bytes(body)
            print(f"== {backend}: GET body {len(body)} bytes", flush=True)
            get_url = f"{gateway.url}/v1/predictions/{done}"
            with refs.bare_server(body_file) as bare:
                bare_url = f"{bare.url}/v1/predictions/{done}"
                gets = Rounds(f"{backend} GET finished vs bare")
                for n in range(1, args.rounds + 1 if "get" in args.parts else 1):
                    gets.round(n, load.with_cpu(gateway.pid, args.seconds,
                                                lambda: load.wrk(get_url, **wrk_args)),
                               load.with_cpu(bare.proc.pid, args.seconds,
                                             lambda: load.wrk(bare_url, **wrk_args)))
                if gets.ratios:
                    summaries.append(gets.summary())
                if "latency" in args.parts:
                    summaries.append(f"{backend} " + added_latency(
                        get_url, bare_url, args.rounds, args.seconds))
            if "reads" in args.parts:
                summaries.append(inflight_gets(gateway, backend, running["id"], work, args))
                result = load.wrk(f"{gateway.url}/v1/predictions", **wrk_args)
                summaries.append(f"{backend + ' list (100 a page)':32} {result.line()}")
            script = work / "post.lua"
            script.write_text(POST_LUA.format(body=json.dumps(CREATE_BODY)))
            creates = Rounds(f"{backend} create vs peer")
            for n in range(1, args.rounds + 1 if "create" in args.parts else 1):
                sub = load.with_cpu(gateway.pid, args.seconds, lambda: load.wrk(
                    f"{gateway.url}/v1/predictions", script=script, **wrk_args))
                if peer is None:
                    print(f"  round {n} {creates.label:32} gateway {sub.line()}", flush=True)
                    continue
                ref = load.wrk(f"{peer.url}/jobs", script=script, **wrk_args)
                creates.round(n, sub, ref)
            if peer is not None and creates.ratios:
                summaries.append(creates.summary())
        finally:
            gateway.stop()
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--no-peer", action="store_true", help="skip the FastAPI peer")
    parser.add_argument("--parts", default="get,latency,reads,create",
                        help="which figures (a quicker run): get, latency, reads, create")
    args = parser.parse_args()
    print("command:", " ".join(["python", *sys.argv]))
    load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"{len(os.sched_getaffinity(0))} cores, load average before {load_avg}; "
          f"wrk -t2 -c{args.connections} -d{args.seconds:g}s", flush=True)
    summaries: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        peer_cm: Callable[[], contextlib.AbstractContextManager[refs.Server | None]] = (
            (lambda: contextlib.nullcontext(None)) if args.no_peer
            else (lambda: refs.peer_server(Path(tmp)))
        )
        with peer_cm() as peer:
            for backend in args.backends.split(","):
                summaries += run_backend(backend, args, peer)
    print("== summary")
    for line in summaries:
        print(line)


if __name__ == "__main__":
    main()
