"""A large output file copied into owned storage: time and memory against ``curl -o``.

Serves a file of ``--mib`` MiB from 127.0.0.1 (aiohttp's static file response), starts
``cutover serve`` (SQLite, a fake provider whose ``file_hosts`` is 127.0.0.1, a size limit
above the file), creates a prediction and completes it with a signed fake-provider webhook
whose output is the file's URL; measures the seconds from the webhook to the prediction
reporting ``succeeded`` and the gateway's peak resident memory growth (VmHWM), and the
same file fetched by ``curl -o``, in alternating rounds.

    .venv/bin/python bench/outputs.py [--mib 1024] [--rounds 2]
"""

from __future__ import annotations

import argparse
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
    """(seconds, peak RSS growth in MiB) of one output copy."""
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
    return seconds, (kib(pid, "VmHWM") - before) / 1024


def size_args(doc: str | None) -> argparse.Namespace:
    """``--mib`` (1024) and ``--rounds`` (2); prints the header (command, machine, load)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load.print_header()
    return args


def main() -> None:
    args = size_args(__doc__)
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
        url = f"sqlite+aiosqlite:///{work / 'cutover.db'}"
        config = gateway_config(url, work)
        config["gateway"]["max_output_bytes"] = (args.mib + 1) << 20
        config["gateway"]["output_download_timeout_s"] = 600
        config["gateway"]["max_job_lifetime_s"] = 3600
        config["providers"]["fake"]["file_hosts"] = ["127.0.0.1"]
        gateway = GatewayProcess(config, work).start()
        ratios, growths = [], []
        try:
            with httpx.Client(headers=AUTH, timeout=600) as http:
                for _ in range(50):  # the file server is up
                    try:
                        http.head(file_url)
                        break
                    except httpx.TransportError:
                        time.sleep(0.1)
                for n in range(1, args.rounds + 1):
                    seconds, growth = copy_once(gateway, url, file_url, http)
                    start = time.perf_counter()
                    subprocess.run(["curl", "-s", "-o", str(work / "curl.out"), file_url],
                                   check=True)
                    curl_s = time.perf_counter() - start
                    (work / "curl.out").unlink()
                    ratios.append(curl_s / seconds)
                    growths.append(growth)
                    print(f"  round {n} {args.mib} MiB: gateway {seconds:.2f} s "
                          f"(peak RSS +{growth:.0f} MiB), curl -o {curl_s:.2f} s, "
                          f"speed ratio {ratios[-1]:.2f}", flush=True)
        finally:
            gateway.stop()
            server.terminate()
            server.wait()
    print("== summary")
    print(f"output {args.mib} MiB from a URL: speed vs curl -o median {load.median(ratios):.2f}, "
          f"peak RSS growth median {load.median(growths):.0f} MiB")


if __name__ == "__main__":
    main()
