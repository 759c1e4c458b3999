"""Cold start and idle cost of the gateway against the bare aiohttp server.

Starts ``cutover serve`` (SQLite, a fake provider, every background loop running) and
measures the seconds from spawning the process to the first 200 of ``GET /ready``, on a
fresh database (migrations included) and again on the existing one, and the CPU seconds
the process had used by then (steadier than wall time on a shared machine); then, left
idle, its
resident memory (MiB) and CPU (% of one core over ``--idle-seconds``). The bare aiohttp
server (bench/support/refs.py) is measured the same way, in alternating rounds.

The gateway's own modules are compiled to bytecode first, as pip does when it installs
the wheel (the Docker image has them): the bare server's libraries have theirs, and an
editable checkout under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile about 110
modules from source at every start.

    .venv/bin/python bench/startup.py [--rounds 3] [--idle-seconds 10]

``--instructions`` measures instead what the load does not move: the instructions (in
millions) of one start of each, from spawning to a listening socket, under valgrind's
callgrind (``apt-get install valgrind``; about a minute each): the gateway on a fresh
and on an existing database, and the bare server (bench/support/listening.py).
``--instructions --cog-providers N`` configures N Cog providers on ``http://`` URLs
instead of the fake one (each builds an httpx client at start; docs/benchmarks.md,
"Start-up: the last 10 %").
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ratios import gateway_config
from bench.support import load, refs
from tests.support.orphans import die_with_parent
from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "adapters", "gateway", "shadow")
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def idle(pid: int, seconds: float) -> tuple[float, float]:
    """(% of one core, RSS MiB) over ``seconds`` of no requests."""
    time.sleep(1.0)  # let start-up work finish
    before = cpu_s(pid)
    time.sleep(seconds)
    return 100 * (cpu_s(pid) - before) / seconds, rss_mib(pid)


def compile_project() -> None:
    """Write the gateway's bytecode (``__pycache__``, git-ignored), as a wheel install does."""
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def gateway(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = gateway_config(f"sqlite+aiosqlite:///{work / 'cutover.db'}", work)
    path = work / "cutover.toml"
    path.write_bytes(tomli_w.dumps(config).encode())
    command = shutil.which("cutover", path=str(Path(sys.executable).parent))
    assert command, "the cutover console script is not installed in this venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
    log = (work / "gateway.log").open("ab")
    proc = subprocess.Popen([command, "serve", "--config", str(path)], stdout=log,
                            stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
    return proc, config["gateway"]["public_url"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def instructions(command: list[str], work: Path) -> float:
    """Millions of instructions callgrind counted for ``command`` (a start to listening)."""
    out = work / "callgrind.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command],
        capture_output=True, text=True, check=True, env=env,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    out.unlink()
    return int(found.group(1)) / 1e6


def count_instructions(cog_providers: int = 0) -> None:
    listening = [sys.executable, str(ROOT / "bench" / "support" / "listening.py")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = gateway_config(f"sqlite+aiosqlite:///{work / 'cutover.db'}", work)
        if cog_providers:  # never contacted before listening: a closed port will do
            names = [f"cog{n}" for n in range(cog_providers)]
            config["providers"] = {
                name: {"kind": "cog", "base_url": f"http://127.0.0.1:{9 + n}"}
                for n, name in enumerate(names)
            }
            config["routes"] = [{"model": f"bench/{name}", "provider": name} for name in names]
        path = work / "cutover.toml"
        path.write_bytes(tomli_w.dumps(config).encode())
        fresh = instructions([*listening, "gateway", str(path)], work)
        existing = instructions([*listening, "gateway", str(path)], work)
        body = work / "body.json"
        body.write_bytes(b"{}")
        bare_script = str(refs.refs_dir() / "bare_aiohttp.py")
        bare = instructions([*listening, "bare", bare_script, str(free_port()), str(body)], work)
    if cog_providers:
        print(f"the gateway with {cog_providers} Cog providers (http://), not the fake one")
    print(f"instructions to listening (M)  gateway fresh db {fresh:,.0f}, existing db "
          f"{existing:,.0f}; bare aiohttp {bare:,.0f} (ratios {fresh / bare:.2f}, "
          f"{existing / bare:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions to listening under callgrind instead")
    parser.add_argument("--cog-providers", type=int, default=0,
                        help="with --instructions: this many Cog providers, not the fake")
    args = parser.parse_args()
    load.print_header()
    compile_project()
    if args.instructions:
        count_instructions(args.cog_providers)
        return
    fresh, warm, cpu, rss, ref_start, ref_cpu, ref_rss = [], [], [], [], [], [], []
    used: dict[str, list[float]] = {"fresh database": [], "existing database": [], "bare": []}
    for n in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            for label, times in (("fresh database", fresh), ("existing database", warm)):
                proc, url = gateway(work)
                try:
                    times.append(refs.wait_ready(url, proc))
                    used[label].append(cpu_s(proc.pid))
                    if label == "existing database":
                        busy, mem = idle(proc.pid, args.idle_seconds)
                        cpu.append(busy)
                        rss.append(mem)
                finally:
                    stop(proc)
                print(f"  round {n} gateway to /ready, {label:18} {times[-1]:.3f} s "
                      f"(CPU {used[label][-1]:.2f} s)", flush=True)
            print(f"  round {n} gateway idle {cpu[-1]:.2f} % of a core, RSS {rss[-1]:.0f} MiB")
            body = work / "body.json"
            body.write_bytes(b"{}")
            with refs.bare_server(body) as bare:
                ref_start.append(bare.ready_after_s)
                used["bare"].append(cpu_s(bare.proc.pid))
                busy, mem = idle(bare.proc.pid, args.idle_seconds)
                ref_cpu.append(busy)
                ref_rss.append(mem)
            print(f"  round {n} bare aiohttp to /ready {ref_start[-1]:.3f} s (CPU "
                  f"{used['bare'][-1]:.2f} s), idle "
                  f"{ref_cpu[-1]:.2f} % of a core, RSS {ref_rss[-1]:.0f} MiB", flush=True)
    med = load.median
    print("== summary")
    print(f"cold start to /ready (median)  gateway fresh db {med(fresh):.3f} s, existing db "
          f"{med(warm):.3f} s; bare aiohttp {med(ref_start):.3f} s")
    fresh_cpu, warm_cpu, bare_cpu = (med(v) for v in used.values())
    print(f"CPU to /ready (median)         gateway fresh db {fresh_cpu:.2f} s, existing db "
          f"{warm_cpu:.2f} s; bare aiohttp {bare_cpu:.2f} s (ratios {fresh_cpu / bare_cpu:.1f}, "
          f"{warm_cpu / bare_cpu:.1f})")
    print(f"idle (median)                  gateway {med(cpu):.2f} % of a core, "
          f"{med(rss):.0f} MiB; bare aiohttp {med(ref_cpu):.2f} %, {med(ref_rss):.0f} MiB")


if __name__ == "__main__":
    main()
