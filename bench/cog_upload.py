"""A large output file from a real Cog server into owned storage: time and memory.

Two Cog servers run examples/bigfile (one output file of ``--mib`` MiB): one with the
gateway as its ``--upload-url`` (docs/cog.md §1.10; the gateway streams each upload into
its storage), one whose uploads go to a bare aiohttp receiver writing the body to a file
(the same aiohttp and Python, nothing else: the reference, like ``curl -o`` for a URL).
In alternating rounds it measures the seconds from creating the prediction to
``succeeded`` through the gateway (SQLite, local storage), against the same prediction
run directly on the reference server, and the gateway's peak resident memory growth
(VmHWM). Both include the model writing the file (the same work on both sides).

The gateway runs with the default ``[storage] fsync = true`` (each upload on disk before
it is recorded, docs/storage.md "Durability"); the bare receiver does not fsync, so
``--no-fsync`` gives the like-for-like figure.

    .venv/bin/python bench/cog_upload.py [--mib 1024] [--rounds 2] [--no-fsync]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.outputs import kib, reset_peak, size_args, wait_finished
from bench.ratios import AUTH, gateway_config
from bench.support import load
from tests.support.cog_server import CogServer
from tests.support.orphans import die_with_parent
from tests.support.process import GatewayProcess, free_port

MODEL = Path(__file__).resolve().parents[1] / "examples" / "bigfile"
UPLOAD_TOKEN = "bench-upload-token-0123456789"

SINK = """
import sys
from aiohttp import web
directory, port = sys.argv[1], int(sys.argv[2])
async def put(request):
    path = f"{directory}/{request.match_info['name']}"
    with open(path, "wb") as handle:
        async for chunk in request.content.iter_any():
            handle.write(chunk)
    return web.Response(status=201, headers={"Location": f"http://sink/{request.match_info['name']}"})
app = web.Application()
app.router.add_put("/{name}", put)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""


def through_gateway(gateway: GatewayProcess, http: httpx.Client, mib: int) -> tuple[float, float]:
    """(seconds, peak RSS growth in MiB) of one prediction through the gateway."""
    pid = gateway._proc.pid  # type: ignore[union-attr]
    before = reset_peak(pid)
    start = time.perf_counter()
    body = {"version": "bench/bigfile", "input": {"mib": mib}}
    job_id = http.post(f"{gateway.url}/v1/predictions", json=body).json()["id"]
    done = wait_finished(http, gateway.url, job_id)
    seconds = time.perf_counter() - start
    if done["status"] != "succeeded":
        raise RuntimeError(f"the prediction failed: {done['error']}")
    return seconds, (kib(pid, "VmHWM") - before) / 1024


def direct(cog: CogServer, http: httpx.Client, mib: int) -> float:
    start = time.perf_counter()
    done = http.post(f"{cog.url}/predictions", json={"input": {"mib": mib}}).json()
    if done["status"] != "succeeded":
        raise RuntimeError(f"the reference prediction failed: {done.get('error')}")
    return time.perf_counter() - start


def main() -> None:
    args = size_args(__doc__, no_fsync=True)
    with tempfile.TemporaryDirectory(prefix="perf-io-bench-") as tmp:
        work = Path(tmp)
        (work / "sink").mkdir()
        sink_port = free_port()
        sink = subprocess.Popen([sys.executable, "-c", SINK, str(work / "sink"), str(sink_port)],
                                preexec_fn=die_with_parent)
        config = gateway_config(f"sqlite+aiosqlite:///{work / 'cutover.db'}", work)
        port = int(config["gateway"]["listen"].rsplit(":", 1)[1])
        upload_url = f"http://127.0.0.1:{port}/provider-uploads/cog/{UPLOAD_TOKEN}/"
        ours = CogServer(MODEL, args=["--upload-url", upload_url])
        reference = CogServer(MODEL, args=["--upload-url", f"http://127.0.0.1:{sink_port}/"])
        ratios, growths = [], []
        with ours, reference:
            config["gateway"]["max_output_bytes"] = (args.mib + 1) << 20
            config["providers"] = {"cog": {"kind": "cog", "base_url": ours.url,
                                           "upload_token": UPLOAD_TOKEN}}
            config["routes"] = [{"model": "bench/bigfile", "provider": "cog"}]
            config["storage"] = {"fsync": not args.no_fsync}
            gateway = GatewayProcess(config, work).start()
            try:
                with httpx.Client(headers=AUTH, timeout=600) as http:
                    through_gateway(gateway, http, 1)  # warm both paths
                    direct(reference, http, 1)
                    for n in range(1, args.rounds + 1):
                        seconds, growth = through_gateway(gateway, http, args.mib)
                        ref_s = direct(reference, http, args.mib)
                        for leftover in (work / "sink").iterdir():
                            leftover.unlink()
                        ratios.append(ref_s / seconds)
                        growths.append(growth)
                        print(f"  round {n} {args.mib} MiB: gateway {seconds:.2f} s (peak RSS "
                              f"+{growth:.0f} MiB), Cog to a bare receiver {ref_s:.2f} s, "
                              f"speed ratio {ratios[-1]:.2f}", flush=True)
            finally:
                gateway.stop()
                sink.terminate()
                sink.wait()
    print("== summary")
    fsync = "off" if args.no_fsync else "on (the bare receiver does not fsync)"
    print(f"output {args.mib} MiB from Cog (--upload-url), fsync {fsync}: speed vs a bare "
          f"receiver median {load.median(ratios):.2f}, peak RSS growth median "
          f"{load.median(growths):.0f} MiB")


if __name__ == "__main__":
    main()
