"""One ``replicate.run()`` through cutover in front of a real Cog server, against Cog direct.

Starts the real Cog server (coglet, examples/echo) and ``cutover serve`` (SQLite by default,
every background loop running, one route ``bench/echo`` to that Cog server over plain
HTTP), and a second Cog server of the same model for the direct arm (Cog runs one
prediction at a time). Each round runs ``--per-round`` predictions per arm, the arms
alternating round by round so both see the same machine:

- **cutover**: the unmodified ``replicate`` client (``replicate.Client(base_url=...)``)
  calls ``run("bench/echo:<version>", input={"prompt": ...})``: create with ``Prefer:
  wait``, the gateway dispatches to Cog, Cog posts its webhooks (start, output, logs,
  completed) back, the finalizer completes the job and the held answer returns;
- **cutover held**: the same ``run()`` on a second route (its own version) to a second
  provider on the same Cog server with ``held = true`` (docs/cog.md §3): Cog's synchronous
  request held open, no webhooks;
- **direct**: the same input POSTed to Cog's own ``/predictions`` (synchronous), what an
  app calling Cog itself would pay (the reference issue 23's targets are written against);
- **direct with webhooks**: the same input ``PUT`` asynchronously to the same Cog server
  (``Prefer: respond-async``, the gateway's own request: every webhook event asked for)
  with a webhook to a bare aiohttp receiver in this process, timed to the ``completed``
  webhook's arrival: what Cog's own webhook path costs before any gateway runs (several
  ms over the synchronous call: docs/benchmarks.md, "A run() with its job writes on
  sqlite3").

The four arms rotate round by round. Prints per round and over all rounds each arm's
p50/p99 (ms), each gateway arm's added p50/p99 over each reference, and the gateway
process's CPU time per prediction (psutil, user + system, over the gateway arm's
predictions only), then issue 23's targets, met or NOT met, for each gateway arm. On a
shared machine CPU per prediction is the figure to compare between runs; latencies move
with the load.

``--profile FILE`` runs the gateway under cProfile timed by CPU time
(bench/support/cpuprofile.py; figures inflated by the profiler; the stats are written to
FILE when the gateway stops) for the per-stage
breakdown in docs/benchmarks.md ("Where a prediction's 20 ms go").

    .venv/bin/python bench/e2e.py [--rounds 4] [--per-round 50] [--backend sqlite|postgres]
        [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import replicate
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ratios import TOKEN, gateway_config
from bench.support import load
from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess

ECHO = Path(__file__).resolve().parents[1] / "examples" / "echo"
MODEL = "bench/echo"
HELD_MODEL = "bench/echo-held"  # the same Cog server through a provider with held = true
GATEWAY_ARMS = ("cutover", "cutover held")
VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
HELD_VERSION = "ae1d" + VERSION[4:]  # its own version: a create names the version only
INPUT = {"prompt": "hello"}
CPU_PROFILE = Path(__file__).resolve().parent / "support" / "cpuprofile.py"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def until_ready(http: httpx.Client, cog: CogServer) -> None:
    """Return once Cog's ``/health-check`` says READY: it frees its slot just after its
    last webhook and answer, and a prediction sent before that is refused "At capacity"
    (409; through the gateway, a dispatch retried after a backoff)."""
    while http.get(f"{cog.url}/health-check").json().get("status") != "READY":
        pass


def through_cutover(client: replicate.Client, http: httpx.Client, cog: CogServer,
                    count: int, model: str = MODEL) -> list[float]:
    """Milliseconds of each of ``count`` sequential ``run()`` calls, each started once the
    gateway's Cog server is READY again (untimed)."""
    took = []
    for _ in range(count):
        until_ready(http, cog)
        start = time.perf_counter()
        version = HELD_VERSION if model == HELD_MODEL else VERSION
        output = client.run(f"{model}:{version}", input=INPUT)
        took.append((time.perf_counter() - start) * 1000)
        if output != "HELLO":
            raise RuntimeError(f"run() returned {output!r}")
    return took


def direct(http: httpx.Client, cog: CogServer, count: int) -> list[float]:
    """Milliseconds of each of ``count`` sequential synchronous predictions on Cog itself,
    each started once it is READY again (untimed)."""
    took = []
    for _ in range(count):
        until_ready(http, cog)
        start = time.perf_counter()
        body = http.post(f"{cog.url}/predictions", json={"input": INPUT}).json()
        took.append((time.perf_counter() - start) * 1000)
        if body.get("output") != "HELLO":
            raise RuntimeError(f"Cog answered {body!r}")
    return took


class Receiver:
    """A bare aiohttp server on 127.0.0.1, on its own thread and event loop, that takes
    Cog's webhooks: each terminal one's ``(prediction id, status, time.perf_counter())``
    is put on :attr:`completed` as it arrives."""

    def __init__(self) -> None:
        self.completed: queue.Queue[tuple[str, str, float]] = queue.Queue()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("status") in ("succeeded", "failed", "canceled"):
            self.completed.put((body.get("id", ""), body["status"], time.perf_counter()))
        return web.Response()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the webhook receiver did not start")
        try:
            yield self
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def direct_webhooks(http: httpx.Client, cog: CogServer, receiver: Receiver,
                    count: int) -> list[float]:
    """Milliseconds from each of ``count`` sequential asynchronous ``PUT`` s on Cog itself
    (every webhook event, as the gateway asks) to its ``completed`` webhook's arrival at
    ``receiver``, each started once Cog is READY again (untimed)."""
    took = []
    for n in range(count):
        until_ready(http, cog)
        prediction = f"direct-{time.monotonic_ns()}-{n}"
        start = time.perf_counter()
        answer = http.put(f"{cog.url}/predictions/{prediction}", headers={
            "Prefer": "respond-async"}, json={
            "id": prediction, "input": INPUT, "webhook": receiver.url,
            "webhook_events_filter": ["start", "output", "logs", "completed"]})
        if answer.status_code not in (200, 202):
            raise RuntimeError(f"Cog answered {answer.status_code}: {answer.text}")
        while True:
            done, status, at = receiver.completed.get(timeout=30)
            if done == prediction:
                break
        took.append((at - start) * 1000)
        if status != "succeeded":
            raise RuntimeError(f"Cog's prediction {prediction} ended {status}")
    return took


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def summary(label: str, arms: dict[str, list[float]], cpu_ms: dict[str, float]) -> list[str]:
    """The references' p50/p99, then a line per gateway arm: its p50/p99, added p50/p99
    over each reference (ms), and gateway CPU per prediction."""
    p50 = {arm: statistics.median(took) for arm, took in arms.items()}
    p99 = {arm: percentile(took, 0.99) for arm, took in arms.items()}
    lines = [f"{label}: direct p50 {p50['direct']:6.2f} p99 {p99['direct']:6.2f} ms; direct "
             f"with webhooks p50 {p50['webhooks']:6.2f} p99 {p99['webhooks']:6.2f} ms"]
    for arm in GATEWAY_ARMS:
        lines.append(
            f"  {arm:<14} p50 {p50[arm]:6.2f} p99 {p99[arm]:6.2f} ms; added p50 "
            f"{p50[arm] - p50['direct']:+6.2f} p99 {p99[arm] - p99['direct']:+6.2f} ms "
            f"(over direct), p50 {p50[arm] - p50['webhooks']:+6.2f} p99 "
            f"{p99[arm] - p99['webhooks']:+6.2f} ms (over direct with webhooks); gateway CPU "
            f"{cpu_ms[arm]:5.2f} ms/prediction")
    return lines


def verdicts(arms: dict[str, list[float]], cpu_ms: dict[str, float]) -> list[str]:
    """Issue 23's three targets, met or NOT met, for each gateway arm."""
    r50, r99 = statistics.median(arms["direct"]), percentile(arms["direct"], 0.99)
    lines = []
    for arm in GATEWAY_ARMS:
        added50 = statistics.median(arms[arm]) - r50
        added99 = percentile(arms[arm], 0.99) - r99
        checks = [(f"added p50 {added50:+.2f} <= +5 ms", added50 <= 5.0),
                  (f"added p99 {added99:+.2f} <= +15 ms", added99 <= 15.0),
                  (f"CPU {cpu_ms[arm]:.2f} <= 3 ms/prediction", cpu_ms[arm] <= 3.0)]
        lines.append(f"{arm}: " + "; ".join(
            f"{text} {'met' if ok else 'NOT met'}" for text, ok in checks))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--profile", type=Path, help="run the gateway under cProfile")
    args = parser.parse_args()
    load.print_header()
    with (tempfile.TemporaryDirectory(prefix="perf-e2e-") as tmp, CogServer(ECHO) as cog,
          CogServer(ECHO) as reference):
        work = Path(tmp)
        with sync_database(args.backend, work) as database_url:
            config = gateway_config(database_url, work)
            # two providers on the gateway's one Cog server: the arms never overlap
            config["providers"] = {"cog": {"kind": "cog", "base_url": cog.url},
                                   "cog-held": {"kind": "cog", "base_url": cog.url,
                                                "held": True}}
            config["routes"] = [{"model": MODEL, "version": VERSION, "provider": "cog"},
                                {"model": HELD_MODEL, "version": HELD_VERSION,
                                 "provider": "cog-held"}]
            wrapper = ([sys.executable, str(CPU_PROFILE), str(args.profile.resolve())]
                       if args.profile else None)
            gateway = GatewayProcess(config, work, wrapper=wrapper).start()
            try:
                run_rounds(args, gateway, cog, reference)
            finally:
                gateway.stop()
    if args.profile:
        print(f"profile written to {args.profile}")


def run_rounds(args: argparse.Namespace, gateway: GatewayProcess, ours: CogServer,
               cog: CogServer) -> None:
    process = psutil.Process(gateway.pid)
    client = replicate.Client(api_token=TOKEN, base_url=gateway.url)
    names = [*GATEWAY_ARMS, "direct", "webhooks"]
    every: dict[str, list[float]] = {arm: [] for arm in names}
    every_cpu = dict.fromkeys(GATEWAY_ARMS, 0.0)
    with httpx.Client(timeout=60) as http, Receiver().running() as receiver:
        runs: dict[str, Callable[[], list[float]]] = {
            "cutover": lambda: through_cutover(client, http, ours, args.per_round, MODEL),
            "cutover held": lambda: through_cutover(client, http, ours, args.per_round,
                                                    HELD_MODEL),
            "direct": lambda: direct(http, cog, args.per_round),
            "webhooks": lambda: direct_webhooks(http, cog, receiver, args.per_round),
        }
        through_cutover(client, http, ours, 5, MODEL)  # warm every path (imports, connections)
        through_cutover(client, http, ours, 5, HELD_MODEL)
        direct(http, cog, 5)
        direct_webhooks(http, cog, receiver, 5)
        for n in range(1, args.rounds + 1):
            took: dict[str, list[float]] = {}
            cpu: dict[str, float] = {}
            for arm in names[n % 4:] + names[:n % 4]:  # each arm first in turn
                before = cpu_s(process)
                took[arm] = runs[arm]()
                cpu[arm] = (cpu_s(process) - before) / args.per_round * 1000
            for arm in names:
                every[arm] += took[arm]
            for arm in GATEWAY_ARMS:
                every_cpu[arm] += cpu[arm] / args.rounds
            for line in summary(f"round {n} ({args.per_round} each)", took, cpu):
                print("  " + line, flush=True)
    print("== summary")
    total = args.rounds * args.per_round
    for line in summary(f"{args.backend} run() vs Cog direct, {total} each", every, every_cpu):
        print(line)
    print("targets (issue 23, against Cog direct): added p50 <= +5 ms, p99 <= +15 ms, "
          "gateway CPU <= 3 ms/prediction")
    for line in verdicts(every, every_cpu):
        print(line)


if __name__ == "__main__":
    main()
