"""Create and read throughput of the Replicate-compatible API, measured with wrk.

Starts ``cutover serve`` as a subprocess (plain HTTP; a fake provider that accepts every
job and is never polled, so only the API and its store are measured) on each backend, and
loads it from a second process with wrk (Debian package ``wrk``) over loopback:

* ``create``: POST /v1/predictions (each request stores a job and wakes the dispatcher,
  which submits it to the fake provider in the same process);
* ``get``: GET /v1/predictions/{id} of one stored prediction;
* ``list``: GET /v1/predictions (a page of 100).

Prints requests per second and latency percentiles, and the command that produced them.

    .venv/bin/python bench/api_throughput.py [--seconds 10] [--connections 32]
        [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.databases import sync_database
from tests.support.process import GatewayProcess, free_port

TOKEN = "r8_bench"  # a local benchmark value, not a credential
POST_SCRIPT = """
wrk.method = "POST"
wrk.body = '{"version": "bench/echo", "input": {"prompt": "hello"}}'
wrk.headers["Content-Type"] = "application/json"
"""


def config(database_url: str, workdir: Path) -> dict:
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


def wrk(url: str, seconds: int, connections: int, script: Path | None = None) -> str:
    command = [
        "wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency",
        "-H", f"Authorization: Bearer {TOKEN}", url,
    ]
    if script is not None:
        command[1:1] = ["-s", str(script)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def summary(output: str) -> str:
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    percentiles = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)", output, re.MULTILINE))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return (
        f"{float(rate.group(1)) if rate else 0:8.0f} req/s   p50 {percentiles.get('50', '?'):>8}"
        f"   p90 {percentiles.get('90', '?'):>8}   p99 {percentiles.get('99', '?'):>8}"
        + (f"   NON-2xx: {errors.group(1)}" if errors else "")
    )


def run_backend(backend: str, seconds: int, connections: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, sync_database(backend, Path(tmp)) as url:
        work = Path(tmp)
        process = GatewayProcess(config(url, work), work).start()
        try:
            script = work / "post.lua"
            script.write_text(POST_SCRIPT)
            listing = f"{process.url}/v1/predictions"
            created = wrk(listing, seconds, connections, script)
            print(f"{backend:9} create {summary(created)}")
            with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                one = http.get(listing).json()["results"][0]["id"]
            print(f"{backend:9} get    {summary(wrk(f'{listing}/{one}', seconds, connections))}")
            print(f"{backend:9} list   {summary(wrk(listing, seconds, connections))}")
        finally:
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    print("command:", " ".join(["python", *sys.argv]))
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{len(os.sched_getaffinity(0))} cores; wrk -t2 -c{args.connections} -d{args.seconds}s"
    )
    for backend in args.backends.split(","):
        run_backend(backend, args.seconds, args.connections)


if __name__ == "__main__":
    main()
