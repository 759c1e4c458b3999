"""What a shadow costs the primary create path: p99 of POST /v1/predictions, shadow on/off.

One gateway app in this process (SQLite file, background loops not started, so only the
create path is timed), one route with a candidate and a shadow policy that admits the
input. Rounds alternate which setting goes first: the route's shadow percent set to 0
through the admin API, or to 100 (every create then also writes its shadow row in the
same transaction), each timing ``--creates`` sequential creates. Per round and overall
it prints the p50 and p99 latency of each setting, the p99 ratio (on / off) and the p99
difference in ms (issue 11 asks for under 1 ms).

    .venv/bin/python bench/shadow_create.py [--rounds 5] [--creates 400]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.app import create_app
from gateway.config import Settings

TOKEN = "r8_bench"  # a local benchmark value, not a credential
ADMIN = "adm_bench"  # a local benchmark value, not a credential
ROUTE = "bench/echo"


def settings(workdir: Path) -> Settings:
    return Settings(
        gateway={
            "listen": "127.0.0.1:0",
            "public_url": "http://127.0.0.1:0",
            "database_url": f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
            "storage_url": f"file://{workdir / 'assets'}",
            "api_tokens": [TOKEN],
        },
        admin={"tokens": [ADMIN]},
        providers={"control": {"kind": "fake"}, "candidate": {"kind": "fake"}},
        routes=[{
            "model": ROUTE, "provider": "control", "candidate": "candidate",
            "baseline_percent": 0,
            "shadow_policy": {"allow_fields": ["prompt"], "max_input_bytes": 1024},
        }],
    )


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def set_shadow(client: TestClient, percent: int) -> None:
    response = await client.post(
        f"/admin/routes/{ROUTE}/shadow",
        json={"percent": percent, "reason": "benchmark"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status == 200, await response.text()


async def timed_creates(client: TestClient, count: int) -> list[float]:
    spent = []
    body = {"input": {"prompt": "hello"}}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(count):
        started = time.perf_counter()
        response = await client.post(f"/v1/models/{ROUTE}/predictions", json=body,
                                     headers=headers)
        await response.read()
        spent.append(time.perf_counter() - started)
        assert response.status == 201
    return spent


async def main(rounds: int, creates: int) -> None:
    print(f"== {' '.join(sys.argv)} on {platform.machine()}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(settings(Path(tmp)), run_loops=False)
        async with TestClient(TestServer(app)) as client:
            await timed_creates(client, 50)  # warm up
            totals: dict[int, list[float]] = {0: [], 100: []}
            for round_ in range(1, rounds + 1):
                figures = {}
                order = (0, 100) if round_ % 2 else (100, 0)  # neither always goes first
                for percent in order:
                    await set_shadow(client, percent)
                    spent = await timed_creates(client, creates)
                    totals[percent] += spent
                    figures[percent] = (p(spent, 0.5), p(spent, 0.99))
                off, on = figures[0], figures[100]
                print(f"round {round_}: p50 off {off[0] * 1e3:.2f} ms on {on[0] * 1e3:.2f} ms; "
                      f"p99 off {off[1] * 1e3:.2f} ms on {on[1] * 1e3:.2f} ms; "
                      f"p99 ratio {on[1] / off[1]:.3f}, +{(on[1] - off[1]) * 1e3:.2f} ms")
            off99, on99 = p(totals[0], 0.99), p(totals[100], 0.99)
            print(f"all rounds ({len(totals[0])} creates each): p99 off {off99 * 1e3:.2f} ms, "
                  f"on {on99 * 1e3:.2f} ms, ratio {on99 / off99:.3f}, "
                  f"difference {(on99 - off99) * 1e3:+.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=400)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.creates))
