"""What a shadow costs the primary create path: POST /v1/predictions, shadow on vs off.

One gateway app in this process (SQLite file, background loops not started, so only the
create path is timed) serves two routes that differ only in their shadow percent:
``bench/off`` (0) and ``bench/on`` (100: every create also writes its shadow row, on the
candidate, in the same transaction; docs/shadow.md). Both have a candidate and a shadow
policy that admits the input. Creates alternate between the routes one by one (ABBA
order), sequentially, so both settings see the same machine load from one moment to the
next; that matters on a shared machine, where load swings dwarf a sub-millisecond
difference. The garbage collector is set as in ``cutover serve`` (gateway/collector.py:
start-up frozen, young generation every 10,000 allocations), not left at the defaults.
Per round and overall it prints, for each setting, the p50 and p99 latency
(ms) and the mean process CPU time per create (ms, the aiosqlite thread included), then
the p99 ratio (on / off) and difference: issue 11 asks for under 1 ms at p99.

    .venv/bin/python bench/shadow_create.py [--rounds 5] [--creates 400]

``--creates`` is per setting and round.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway import collector
from gateway.app import create_app
from gateway.config import Settings

TOKEN = "r8_bench"  # a local benchmark value, not a credential
SETTINGS = {"off": 0, "on": 100}  # route bench/<name>: its shadow percent


def settings(workdir: Path) -> Settings:
    policy = {"allow_fields": ["prompt"], "max_input_bytes": 1024}
    return Settings(
        gateway={
            "listen": "127.0.0.1:0",
            "public_url": "http://127.0.0.1:0",
            "database_url": f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
            "storage_url": f"file://{workdir / 'assets'}",
            "api_tokens": [TOKEN],
        },
        providers={"control": {"kind": "fake"}, "candidate": {"kind": "fake"}},
        routes=[
            {"model": f"bench/{name}", "provider": "control", "candidate": "candidate",
             "shadow_percent": percent, "baseline_percent": 0, "shadow_policy": policy}
            for name, percent in SETTINGS.items()
        ],
    )


def p(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def timed_create(client: TestClient, name: str) -> tuple[float, float]:
    """One create on route ``bench/<name>``: (wall seconds, process CPU seconds)."""
    body = {"input": {"prompt": "hello"}}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    wall, cpu = time.perf_counter(), time.process_time()
    response = await client.post(f"/v1/models/bench/{name}/predictions", json=body,
                                 headers=headers)
    await response.read()
    spent = time.perf_counter() - wall, time.process_time() - cpu
    assert response.status == 201, await response.text()
    return spent


async def interleaved(client: TestClient, creates: int) -> dict[str, list[tuple[float, float]]]:
    """``creates`` creates per setting, alternating off/on in ABBA order."""
    spent: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
    for index in range(creates):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")
        for name in order:
            spent[name].append(await timed_create(client, name))
    return spent


def line(label: str, spent: dict[str, list[tuple[float, float]]]) -> str:
    figures = {}
    for name, samples in spent.items():
        walls = [w for w, _ in samples]
        figures[name] = (p(walls, 0.5), p(walls, 0.99), statistics.fmean(c for _, c in samples))
    off, on = figures["off"], figures["on"]
    return (f"{label}: p50 off {off[0] * 1e3:.2f} on {on[0] * 1e3:.2f} ms; "
            f"p99 off {off[1] * 1e3:.2f} on {on[1] * 1e3:.2f} ms, ratio {on[1] / off[1]:.3f}, "
            f"{(on[1] - off[1]) * 1e3:+.2f} ms; CPU/create off {off[2] * 1e3:.2f} "
            f"on {on[2] * 1e3:.2f} ms ({(on[2] - off[2]) * 1e3:+.2f} ms)")


async def main(rounds: int, creates: int) -> None:
    print(f"== {' '.join(sys.argv)} on {platform.machine()}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="cutover-bench-shadow-") as tmp:
        app = create_app(settings(Path(tmp)), run_loops=False)
        app.on_startup.append(collector.settle)  # the collector as `cutover serve` sets it
        async with TestClient(TestServer(app)) as client:
            await interleaved(client, 50)  # warm up both routes
            totals: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
            for round_ in range(1, rounds + 1):
                spent = await interleaved(client, creates)
                for name, samples in spent.items():
                    totals[name] += samples
                print(line(f"round {round_}", spent))
            print(line(f"all rounds ({len(totals['off'])} creates each)", totals))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=400)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.creates))
