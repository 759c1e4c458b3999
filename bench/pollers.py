"""Thousands of callers polling their predictions every 0.5 s while the provider finishes
them by webhook: what ``wait()`` and ``reload()`` do at scale, and whether those reads
delay the lifecycle (issue 23, item 3).

Per backend and arm, a fresh ``cutover serve`` (every loop running; the fake provider
accepts every job and is never polled) with ``callers x ceil(seconds / run_s)``
predictions, all created and submitted before the window. Then, in processes of their own
on uvloop (bench/support/pollclients.py): the provider, which sends caller n's k-th
completion webhook at ``t0 + run_s * (n / callers + k)`` (so ``callers / run_s``
completions a second, evenly spread) and creates ``--creates-per-s`` predictions one at a
time; and, in the ``on`` arm only, the callers (``--caller-procs`` processes), each polling
its current prediction every 0.5 s and moving to the next once it sees it ``succeeded``.
The ``off`` arm sends the same completions with nobody polling: webhook -> applied with
and without the pollers, side by side in one run, is what the reads cost the lifecycle.

Arms: ``--arms off,on`` per ``--layouts``: ``single`` (one process takes everything),
``split`` (a second ``cutover serve`` on the same store takes the provider webhooks, its
address the API process's ``[gateway] callback_url``; the callers and creates go to the
API process; docs/lifecycle.md, "A lifecycle process") and ``split-creates`` (the same,
the creates sent to the lifecycle process too, as a proxy routing ``POST`` there would),
and ``lane`` (one process with ``[gateway] read_concurrency = --read-concurrency``: at most
that many prediction GETs in their handlers at once, gateway/http/readlane.py).

Prints per arm: completions/s sent, provider webhook -> applied p50/p99 (the terminal
row's ``updated_at`` minus the send time; one clock), the polls served and their p50/p99,
the lag from the completion webhook to its caller seeing the prediction finished, the
create p50/p99 while they poll, the gateway's CPU and the client processes' (all
of them, over the window and their start-up), and issue 23's targets. ``--capacity
RATES`` then sends completions alone at each rate (no polls, ``single``) and reports the
highest whose applied p99 stays within 100 ms: the lifecycle's capacity here, the ceiling
for a ``--run-s`` to be a sustainable load.

    .venv/bin/python bench/pollers.py [--callers sqlite=2000,postgres=1000] [--seconds 30]
        [--run-s 20] [--arms off,on] [--layouts single,split,split-creates,lane]
        [--capacity 50,100,200] [--read-concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.completions import quantile, submitted
from bench.ratios import AUTH, CREATE_BODY, FAKE_SECRET, gateway_config
from bench.startup import cpu_s
from bench.support import load
from tests.support.databases import sync_database
from tests.support.process import GatewayProcess

TARGETS = {"served": 0.95, "p99_ms": 50.0, "lag_s": 1.0, "applied_p99_ms": 100.0}
CLIENTS = Path(__file__).resolve().parent / "support" / "pollclients.py"
START_S = 3.0  # from spawning the client processes to t0: their start-up (imports, uvloop)


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


@contextlib.contextmanager
def gateways(url: str, tmp: Path, layout: str, read_concurrency: int) -> Any:
    """``(api, lifecycle, all)``: the process the callers and creates reach, the one the
    provider's webhooks reach (the same one unless split), and every process started."""
    config = gateway_config(url, tmp)
    if layout == "lane":
        config["gateway"]["read_concurrency"] = read_concurrency
    lifecycle = GatewayProcess(config, tmp)
    started = [lifecycle.start()]
    try:
        if layout.startswith("split"):
            config = gateway_config(url, tmp)
            config["gateway"]["callback_url"] = lifecycle.url
            started.append(GatewayProcess(config, tmp).start())
        yield started[-1], lifecycle, started
    finally:
        for gateway in started:
            gateway.stop()


def clients(role: str, plan: dict[str, Any], tmp: Path, n: int) -> tuple[Any, Path]:
    plan_path, out = tmp / f"{role}-{n}.plan.json", tmp / f"{role}-{n}.out.json"
    plan_path.write_text(json.dumps(plan))
    return subprocess.Popen([sys.executable, str(CLIENTS), role, str(plan_path), str(out)]), out


async def arm(backend: str, callers: int, polls: bool, layout: str, run_s: float,
              seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    """One window: the figures of one arm (``callers`` 0: completions at
    ``callers / run_s`` per second with nobody polling, the ``--capacity`` sweep)."""
    per_caller = math.ceil(seconds / run_s)  # those due within the window
    with tempfile.TemporaryDirectory() as tmpdir, sync_database(backend, Path(tmpdir)) as url:
        tmp = Path(tmpdir)
        with gateways(url, tmp, layout, args.read_concurrency) as (api, lifecycle, started):
            tokens = await submitted(api, url, None, callers * per_caller)
            pairs = list(tokens.items())
            lists = [pairs[n * per_caller:(n + 1) * per_caller] for n in range(callers)]
            completions = [[job_id, token, run_s * (n / callers + k)]
                           for n, mine in enumerate(lists)
                           for k, (job_id, token) in enumerate(mine)]
            t0 = time.time() + START_S
            base = {"api": api.url, "auth": AUTH, "t0": t0, "seconds": seconds}
            procs = [clients("provider", {
                **base, "hooks": lifecycle.url,
                "api": lifecycle.url if layout == "split-creates" else api.url,
                "secret": FAKE_SECRET.decode(),
                "create": CREATE_BODY, "completions": completions,
                "creates_per_s": args.creates_per_s}, tmp, 0)]
            if polls:
                share = -(-callers // args.caller_procs)
                procs += [clients("callers", {**base, "callers": [
                    [job_id for job_id, _ in mine] for mine in lists[p * share:(p + 1) * share]
                ]}, tmp, p) for p in range(args.caller_procs)]
            await asyncio.sleep(max(0.0, t0 - time.time()))
            cpu_before, wall = sum(cpu_s(g.pid) for g in started), time.time()
            await asyncio.sleep(max(0.0, t0 + seconds - time.time()))
            busy = sum(cpu_s(g.pid) for g in started) - cpu_before
            busy = 100 * busy / (time.time() - wall)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            for proc, _ in procs:  # a poll or webhook still out ends within 20 s
                await asyncio.to_thread(proc.wait, 120)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            client_s = (after.ru_utime + after.ru_stime - children.ru_utime
                        - children.ru_stime)
            outs = [json.loads(out.read_text()) for _, out in procs]
            sent = outs[0]["sent"]
            applied = await applied_at(url, list(sent))
    seen: dict[str, float] = {}
    offered = served = errors = 0
    latencies: list[float] = []
    for out in outs[1:]:
        seen.update(out["seen"])
        offered, served, errors = (offered + out["offered"], served + out["served"],
                                   errors + out["errors"])
        latencies += out["latencies"]
    due = [i for i, at in sent.items() if at < t0 + seconds - TARGETS["lag_s"]]
    lags = [seen[i] - sent[i] for i in due if i in seen]
    return {
        "backend": backend, "callers": callers, "polls": polls, "layout": layout,
        "rate": len(sent) / seconds, "hook_errors": outs[0]["hook_errors"],
        "applied": [applied[i] - sent[i] for i in sent if i in applied],
        "unapplied": sum(1 for i in sent if i not in applied),
        "creates": outs[0]["creates"], "create_errors": outs[0]["create_errors"],
        "offered": offered, "served": served, "errors": errors, "latencies": latencies,
        "seconds": seconds, "lags": lags, "due": len(due),
        "late": sum(1 for i in due if i not in seen or seen[i] - sent[i] > TARGETS["lag_s"]),
        "never": sum(1 for i in due if i not in seen), "busy": busy,
        "clients": 100 * client_s / (seconds + START_S),
        "load": os.getloadavg()[0],
    }


def lines_of(r: dict[str, Any]) -> list[str]:
    name = (f"{r['backend']} {r['callers']} callers, {r['layout']}, "
            f"polls {'on' if r['polls'] else 'off'}")
    p99 = quantile(r["applied"], 0.99)
    out = [
        f"{name}: {r['rate']:.0f} completions/s; webhook -> applied p50 "
        f"{quantile(r['applied'], 0.5):.1f} ms p99 {p99:.1f} ms ({r['unapplied']} not applied, "
        f"{r['hook_errors']} webhook errors); creates p50 {quantile(r['creates'], 0.5):.1f} ms "
        f"p99 {quantile(r['creates'], 0.99):.1f} ms ({len(r['creates'])}, "
        f"{r['create_errors']} errors); gateway {r['busy']:.0f} % of a core, clients "
        f"{r['clients']:.0f} %, load {r['load']:.1f}",
    ]
    if r["polls"]:
        share = r["served"] / r["offered"] if r["offered"] else 0.0
        poll_p99 = quantile(r["latencies"], 0.99)
        out.append(
            f"{name}: polls served {share:.1%} of {r['offered']} offered "
            f"({r['served'] / r['seconds']:.0f}/s), p50 {quantile(r['latencies'], 0.5):.1f} ms "
            f"p99 {poll_p99:.1f} ms, errors {r['errors']}; seen finished after the webhook p50 "
            f"{quantile(r['lags'], 0.5):.0f} ms p99 {quantile(r['lags'], 0.99):.0f} ms, "
            f"{r['late']} of {r['due']} over 1 s ({r['never']} never); gateway CPU "
            f"{1e4 * r['busy'] * r['seconds'] / max(1, r['served']):.0f} us per poll served "
            f"(lifecycle included)")
        met = {
            "served >= 95 %": share >= TARGETS["served"],
            "p99 <= 50 ms, no error": poll_p99 <= TARGETS["p99_ms"] and not r["errors"],
            "every one seen within 1 s": bool(r["due"]) and not r["late"],
            "applied p99 <= 100 ms": bool(r["applied"]) and p99 <= TARGETS["applied_p99_ms"]
            and not r["unapplied"],
        }
        out.append(f"{name}: targets " + ", ".join(
            f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    return out


def interference(off: dict[str, Any], on: dict[str, Any]) -> str:
    """Webhook -> applied and creates with the pollers against without: the reads' cost."""
    a_off, a_on = quantile(off["applied"], 0.99), quantile(on["applied"], 0.99)
    c_off, c_on = quantile(off["creates"], 0.99), quantile(on["creates"], 0.99)
    return (f"{on['backend']} {on['layout']}: {on['callers']} pollers add to webhook -> "
            f"applied p50 {quantile(on['applied'], 0.5) - quantile(off['applied'], 0.5):+.1f} ms,"
            f" p99 {a_on - a_off:+.1f} ms ({a_off:.1f} -> {a_on:.1f}); to a create's p99 "
            f"{c_on - c_off:+.1f} ms ({c_off:.1f} -> {c_on:.1f})")


async def capacity(backend: str, rates: list[int], args: argparse.Namespace) -> list[str]:
    lines, best = [], 0
    for rate in rates:
        count = int(rate * args.capacity_s)
        r = await arm(backend, count, False, "single", count / rate, args.capacity_s, args)
        p99 = quantile(r["applied"], 0.99)
        ok = bool(r["applied"]) and p99 <= TARGETS["applied_p99_ms"] and not r["unapplied"]
        best = rate if ok and rate > best else best
        lines.append(f"{backend} capacity, no polls: {r['rate']:.0f} completions/s asked "
                     f"{rate}; applied p50 {quantile(r['applied'], 0.5):.1f} ms p99 {p99:.1f} ms "
                     f"({r['unapplied']} not applied); gateway {r['busy']:.0f} % of a core, "
                     f"load {r['load']:.1f}")
        print("  " + lines[-1], flush=True)
    lines.append(f"{backend} capacity: highest completion rate with applied p99 <= 100 ms "
                 f"and no polls: {best or 'none'} of {','.join(map(str, rates))}/s")
    print("  " + lines[-1], flush=True)
    return lines


async def measure(backend: str, callers: int, args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    for layout in filter(None, args.layouts.split(",")):
        found: dict[str, dict[str, Any]] = {}
        for which in filter(None, args.arms.split(",")):  # --arms "": the capacity alone
            found[which] = await arm(backend, callers, which == "on", layout, args.run_s,
                                     args.seconds, args)
            for line in lines_of(found[which]):
                print("  " + line, flush=True)
                lines.append(line)
        if {"on", "off"} <= set(found):
            lines.append(interference(found["off"], found["on"]))
            print("  " + lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", default="sqlite=2000,postgres=1000",
                        help="backend=callers, comma-separated")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--run-s", type=float, default=20.0,
                        help="seconds a prediction runs: callers / run_s completions a second")
    parser.add_argument("--arms", default="off,on", help="off: no polls; on: the callers poll")
    parser.add_argument("--layouts", default="single,split")
    parser.add_argument("--caller-procs", type=int, default=2)
    parser.add_argument("--read-concurrency", type=int, default=16,
                        help="[gateway] read_concurrency of the lane layout")
    parser.add_argument("--creates-per-s", type=float, default=10.0)
    parser.add_argument("--capacity", default="", help="completion rates, e.g. 50,100,200")
    parser.add_argument("--capacity-s", type=float, default=15.0)
    args = parser.parse_args()
    load.print_header()
    lines: list[str] = []
    for part in args.callers.split(","):
        backend, _, count = part.partition("=")
        lines += asyncio.run(measure(backend, int(count), args))
        if args.capacity:
            lines += asyncio.run(capacity(backend, [int(r) for r in args.capacity.split(",")],
                                          args))
    print("== summary")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
