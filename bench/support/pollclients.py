"""The client processes of ``bench/pollers.py``: the polling callers and the provider.

Each runs as its own process on uvloop (the gateway's event loop), so neither the
callers' loop nor the provider's is the bench's: a caller's poll latency is not the
provider's lag, and a completion webhook is sent when it is due however busy the callers
are. Both read a plan (JSON) and write what they saw (JSON); every time is
``time.time()``, one clock for all the processes of the machine.

    python bench/support/pollclients.py callers PLAN OUT
        PLAN: {"api", "auth" (headers), "t0", "seconds", "callers": [[id, ...], ...]}
        OUT:  {"offered", "served", "errors", "latencies" (s), "seen": {id: t}}
    python bench/support/pollclients.py provider PLAN OUT
        PLAN: {"hooks", "secret" (the fake provider's key), "api", "auth", "create" (body),
               "t0", "seconds", "completions": [[id, token, due], ...], "creates_per_s"}
               (due: seconds after t0)
        OUT:  {"sent": {id: t}, "hook_errors", "hook_s" (s), "creates" (s), "create_errors"}

A caller polls ``GET /v1/predictions/{id}`` of its current prediction every 0.5 s from a
random phase (a tick whose previous poll is still out is offered, not served; one unanswered after
20 s is an error) and moves to
its next prediction once it sees ``succeeded``. The provider sends each prediction's
signed completion webhook at its due time, and meanwhile creates one prediction at a time
at ``creates_per_s`` (the create latency while the callers poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

INTERVAL_S = 0.5  # the replicate clients' poll interval
POLL_TIMEOUT = aiohttp.ClientTimeout(total=20)  # a poll not answered by then is an error


async def _sleep_until(wall: float) -> None:
    await asyncio.sleep(max(0.0, wall - time.time()))


async def callers(plan: dict[str, Any]) -> dict[str, Any]:
    """Every caller of ``plan`` until ``t0 + seconds``; the counters of all of them."""
    api, t0, seconds = plan["api"], plan["t0"], plan["seconds"]
    out: dict[str, Any] = {"offered": 0, "served": 0, "errors": 0, "latencies": [], "seen": {}}
    end = t0 + seconds

    async def one(mine: list[str]) -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                         headers=plan["auth"], timeout=POLL_TIMEOUT) as http:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):  # untimed, before
                async with http.get(f"{api}/health") as warm:  # t0: the caller's connection
                    await warm.read()  # is open when it polls, as a steady caller's is
            await _sleep_until(t0 + random.uniform(0, INTERVAL_S))
            tick, current = time.time(), 0
            pending: asyncio.Task[None] | None = None

            async def poll(job_id: str) -> None:
                nonlocal current
                began = time.time()
                try:
                    async with http.get(f"{api}/v1/predictions/{job_id}") as response:
                        body = await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if not ok:
                    out["errors"] += 1
                    return
                now = time.time()
                out["served"] += 1
                out["latencies"].append(now - began)
                if b'"status":"succeeded"' in body and job_id not in out["seen"]:
                    out["seen"][job_id] = now
                    current = min(current + 1, len(mine) - 1)

            while tick < end:
                out["offered"] += 1
                if pending is None or pending.done():
                    pending = asyncio.create_task(poll(mine[current]))
                tick += INTERVAL_S
                await _sleep_until(tick)
            if pending is not None:
                await pending

    await asyncio.gather(*(one(mine) for mine in plan["callers"]))
    return out


async def provider(plan: dict[str, Any]) -> dict[str, Any]:
    """The completion webhooks of ``plan`` at their due times, and the sampled creates."""
    t0, seconds = plan["t0"], plan["seconds"]
    out: dict[str, Any] = {"sent": {}, "hook_errors": 0, "hook_s": [], "creates": [],
                           "create_errors": 0}
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector, timeout=POLL_TIMEOUT) as http:

        async def complete(job_id: str, token: str) -> None:
            event = json.dumps({"id": f"fake-{job_id}", "status": "completed",
                                "output": "ok"}).encode()
            signature = hmac.new(plan["secret"].encode(), event, hashlib.sha256).hexdigest()
            out["sent"][job_id] = began = time.time()
            try:
                async with http.post(f"{plan['hooks']}/provider-webhooks/fake/{job_id}/{token}",
                                     data=event, headers={"x-fake-signature": signature},
                                     timeout=aiohttp.ClientTimeout(total=10)) as answer:
                    await answer.read()
                    if answer.status != 200:
                        out["hook_errors"] += 1
            except (aiohttp.ClientError, TimeoutError):
                out["hook_errors"] += 1
            out["hook_s"].append(time.time() - began)

        async def creates() -> None:
            rate = plan["creates_per_s"]
            if not rate:
                return
            tick = t0
            while tick < t0 + seconds:
                await _sleep_until(tick)
                began = time.time()
                try:
                    async with http.post(f"{plan['api']}/v1/predictions", json=plan["create"],
                                         headers=plan["auth"]) as answer:
                        await answer.read()
                        if answer.status != 201:
                            out["create_errors"] += 1
                        else:
                            out["creates"].append(time.time() - began)
                except (aiohttp.ClientError, TimeoutError):
                    out["create_errors"] += 1
                tick += 1.0 / rate

        sampler = asyncio.create_task(creates())
        sent: list[asyncio.Task[None]] = []
        for job_id, token, due in sorted(plan["completions"], key=lambda c: c[2]):
            if due >= seconds:
                break
            await _sleep_until(t0 + due)
            sent.append(asyncio.create_task(complete(job_id, token)))
        await asyncio.gather(*sent, sampler)
    return out


def main() -> None:
    role, plan_path, out_path = sys.argv[1:4]
    plan = json.loads(Path(plan_path).read_text())
    work = {"callers": callers, "provider": provider}[role]
    result = uvloop.run(work(plan))
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
