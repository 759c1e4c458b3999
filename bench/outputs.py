"""A large output file copied into owned storage: time and memory against ``curl -o``.

Serves a file of ``--mib`` MiB from 127.0.0.1 (aiohttp's static file response) and starts
two ``cutover serve`` (SQLite, a fake provider whose ``file_hosts`` is 127.0.0.1, a size
limit above the file), one with the default ``[storage] fsync = true`` (each stored file
on disk before the prediction is ``succeeded``, docs/storage.md) and one with
``fsync = false``. In each round it creates a prediction on each and completes it with a
signed fake-provider webhook whose output is the file's URL, measuring the seconds from
the webhook to the prediction reporting ``succeeded`` (polled every 20 ms) and the
gateway's peak resident memory growth (VmHWM); and ``curl -o`` of the same file into the
same directory (the same file system as the storage root). ``curl -o`` does not fsync:
the ratio with fsync on counts the disk write, the ratio with it off is like for like.

The three copies run in an order rotated each round; before each one the previous copy
is removed and ``sync`` flushes the file system, so none pays for writing back another's
dirty pages. Then ``--small`` small outputs (``--small-kib`` KiB each) are stored straight
through the local storage backend, alternating fsync on and off, for what fsync costs a
small file.

    .venv/bin/python bench/outputs.py [--mib 1024] [--rounds 2] [--small 40 --small-kib 64]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ratios import AUTH, CREATE_BODY, FAKE_SECRET, callback_token, gateway_config
from bench.support import load
from tests.support.orphans import die_with_parent
from tests.support.process import GatewayProcess, free_port

FILE_SERVER = """
import sys
from aiohttp import web
path, port = sys.argv[1], int(sys.argv[2])
async def get(request):
    return web.FileResponse(path, headers={"Content-Type": "video/mp4"})
app = web.Application()
app.router.add_get("/big.mp4", get)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> int:
    """Reset the process's VmHWM to its current RSS; that RSS, in KiB."""
    before = kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return before


def wait_finished(http: httpx.Client, base_url: str, job_id: str) -> dict:
    """Poll the prediction every 20 ms until it is terminal; its body."""
    while True:
        body = http.get(f"{base_url}/v1/predictions/{job_id}").json()
        if body["status"] in {"succeeded", "failed", "canceled"}:
            return body
        time.sleep(0.02)


def copy_once(gateway: GatewayProcess, url: str, file_url: str, http: httpx.Client
              ) -> tuple[float, float]:
    """(seconds, peak RSS growth in MiB) of one output copy; the stored file is removed."""
    pid = gateway._proc.pid  # type: ignore[union-attr]
    job_id = http.post(f"{gateway.url}/v1/predictions", json=CREATE_BODY).json()["id"]
    time.sleep(0.5)  # submitted
    before = reset_peak(pid)
    event = json.dumps({"id": f"fake-{job_id}", "status": "completed", "output": file_url})
    signature = hmac.new(FAKE_SECRET, event.encode(), hashlib.sha256).hexdigest()
    token = callback_token(url, job_id)
    start = time.perf_counter()
    http.post(f"{gateway.url}/provider-webhooks/fake/{job_id}/{token}", content=event,
              headers={"x-fake-signature": signature})
    body = wait_finished(http, gateway.url, job_id)
    seconds = time.perf_counter() - start
    if body["status"] != "succeeded":
        raise RuntimeError(f"the copy failed: {body['error']}")
    growth = (kib(pid, "VmHWM") - before) / 1024
    root = Path(str(gateway.config["gateway"]["storage_url"]).removeprefix("file://"))
    for stored in (root / job_id).rglob("*"):
        if stored.is_file():
            stored.unlink()
    return seconds, growth


def curl_once(file_url: str, path: Path) -> float:
    """Seconds of ``curl -o path``; the file is removed after."""
    start = time.perf_counter()
    subprocess.run(["curl", "-s", "-o", str(path), file_url], check=True)
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def small_files(root: Path, kib_each: int, count: int) -> dict[bool, list[float]]:
    """Seconds to store each of ``count`` files of ``kib_each`` KiB with
    ``LocalStorage.put_file`` (a spooled download's way in), fsync on and off in turn."""
    from gateway.storage import LocalStorage

    data = os.urandom(kib_each << 10)
    stores = {on: LocalStorage(root / f"small-{on}", fsync=on) for on in (True, False)}
    seconds: dict[bool, list[float]] = {True: [], False: []}

    async def run() -> None:
        for n in range(count):
            for on in (True, False) if n % 2 == 0 else (False, True):
                spooled = stores[on].temp_path()
                spooled.write_bytes(data)
                start = time.perf_counter()
                await stores[on].put_file(f"p-{n}/{n:016x}/out.png", spooled)
                seconds[on].append(time.perf_counter() - start)

    asyncio.run(run())
    return seconds


def size_args(doc: str | None, small: bool = False, no_fsync: bool = False
              ) -> argparse.Namespace:
    """``--mib`` (1024) and ``--rounds`` (2), with ``small``: ``--small`` (40) and
    ``--small-kib`` (64), with ``no_fsync``: ``--no-fsync``; prints the header (command,
    machine, load)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    if small:
        parser.add_argument("--small", type=int, default=40)
        parser.add_argument("--small-kib", type=int, default=64)
    if no_fsync:
        parser.add_argument("--no-fsync", action="store_true",
                            help="the gateway with [storage] fsync = false")
    args = parser.parse_args()
    load.print_header()
    return args


def main() -> None:
    args = size_args(__doc__, small=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big = work / "big.mp4"
        with big.open("wb") as handle:
            block = os.urandom(1 << 20)
            for _ in range(args.mib):
                handle.write(block)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", FILE_SERVER, str(big), str(port)],
                                  preexec_fn=die_with_parent)
        file_url = f"http://127.0.0.1:{port}/big.mp4"
        gateways: dict[bool, tuple[GatewayProcess, str]] = {}
        seconds: dict[str, list[float]] = {"on": [], "off": [], "curl": []}
        growths: list[float] = []
        try:
            for fsync in (True, False):
                side = work / f"fsync-{fsync}"
                side.mkdir()
                url = f"sqlite+aiosqlite:///{side / 'cutover.db'}"
                config = gateway_config(url, side)
                config["gateway"]["max_output_bytes"] = (args.mib + 1) << 20
                config["gateway"]["output_download_timeout_s"] = 600
                config["gateway"]["max_job_lifetime_s"] = 3600
                config["providers"]["fake"]["file_hosts"] = ["127.0.0.1"]
                config["storage"] = {"fsync": fsync}
                gateways[fsync] = (GatewayProcess(config, side).start(), url)
            with httpx.Client(headers=AUTH, timeout=600) as http:
                for _ in range(50):  # the file server is up
                    try:
                        http.head(file_url)
                        break
                    except httpx.TransportError:
                        time.sleep(0.1)
                copies = ["on", "off", "curl"]
                for n in range(1, args.rounds + 1):
                    for what in copies[n - 1 :] + copies[: n - 1]:  # rotated each round
                        os.sync()
                        if what == "curl":
                            seconds[what].append(curl_once(file_url, work / "curl.out"))
                            continue
                        gateway, url = gateways[what == "on"]
                        took, growth = copy_once(gateway, url, file_url, http)
                        seconds[what].append(took)
                        growths.append(growth)
                    on, off, curl_s = (seconds[what][-1] for what in copies)
                    print(f"  round {n} {args.mib} MiB: gateway fsync on {on:.2f} s, "
                          f"fsync off {off:.2f} s, curl -o {curl_s:.2f} s; speed ratio "
                          f"on {curl_s / on:.2f}, off {curl_s / off:.2f} "
                          f"(peak RSS +{max(growths[-2:]):.0f} MiB)", flush=True)
        finally:
            for gateway, _ in gateways.values():
                gateway.stop()
            server.terminate()
            server.wait()
        small = small_files(work, args.small_kib, args.small) if args.small else None
    ratios = {what: [c / s for c, s in zip(seconds["curl"], seconds[what], strict=True)]
              for what in ("on", "off")}
    print("== summary")
    print(f"output {args.mib} MiB from a URL: speed vs curl -o median "
          f"{load.median(ratios['on']):.2f} with fsync on (the default; curl -o does not "
          f"fsync), {load.median(ratios['off']):.2f} with it off; "
          f"peak RSS growth median {load.median(growths):.0f} MiB")
    if small is not None:
        print(f"small output ({args.small_kib} KiB) stored, median of {args.small}: "
              f"fsync on {load.median(small[True]) * 1e3:.2f} ms, "
              f"off {load.median(small[False]) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
