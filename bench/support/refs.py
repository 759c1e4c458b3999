"""The reference programs benchmarks compare against, as subprocesses.

* the bare aiohttp server (``bare_aiohttp.py``), answering a fixed body: the physical limit
  of the GET path, run with this project's Python;
* the peer (FastAPI + Celery + Redis + PostgreSQL, ``peer/app.py``), run from its own venv
  (``~/.cache/peer-venv``, built from ``peer/requirements.txt`` when missing).

Neither is part of this repository: ``CUTOVER_BENCH_REFS`` names the directory that holds
them (else the first ``shared/bench`` of those :func:`refs_dir` tries). docs/benchmarks.md
says how they are used.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.orphans import die_with_parent
from tests.support.process import free_port

__all__ = ["Server", "bare_server", "peer_server", "refs_dir", "wait_ready"]

PEER_VENV = Path.home() / ".cache" / "peer-venv"
PG_HOST = "127.0.0.1"


def refs_dir() -> Path:
    """Where ``bare_aiohttp.py`` and ``peer/`` are (see the module docstring)."""
    candidates = [os.environ.get("CUTOVER_BENCH_REFS")]
    checkout = Path(__file__).resolve().parents[2]
    candidates += [str(checkout.parent / "shared" / "bench"), "/work/shared/bench"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "bare_aiohttp.py").exists():
            return Path(candidate)
    sys.exit("reference programs not found: set CUTOVER_BENCH_REFS to the shared bench dir")


class Server:
    """A started reference process and its base URL."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, started_s: float) -> None:
        self.proc = proc
        self.url = url
        self.ready_after_s = started_s

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> float:
    """Poll ``url/ready`` until it answers 200; seconds since the call."""
    start = time.perf_counter()
    with httpx.Client(timeout=2.0) as client:
        while time.perf_counter() - start < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
            try:
                if client.get(f"{url}/ready").status_code == 200:
                    return time.perf_counter() - start
            except httpx.TransportError:
                pass
            time.sleep(0.005)
    raise RuntimeError(f"{url}/ready did not answer within {timeout_s} s")


def _spawn(command: list[str], env: dict[str, str] | None = None, log: Path | None = None):
    """A reference process in a session of its own, as the gateway is
    (tests/support/process.py): with the kernel's scheduler autogroups (one per session,
    on by default), a server sharing the bench's session shares its CPU with wrk, and on a
    busy machine the two sides of a ratio were not scheduled alike (docs/benchmarks.md)."""
    out = log.open("ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        command, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent,
        start_new_session=True,
    )


@contextmanager
def bare_server(body_file: Path) -> Iterator[Server]:
    """The bare aiohttp server answering ``body_file``'s bytes, on a free port."""
    port = free_port()
    start = time.perf_counter()
    proc = _spawn([sys.executable, str(refs_dir() / "bare_aiohttp.py"), str(port), str(body_file)])
    server = Server(proc, f"http://127.0.0.1:{port}", 0.0)
    try:
        wait_ready(server.url, proc)
        server.ready_after_s = time.perf_counter() - start
        yield server
    finally:
        server.stop()


def ensure_peer_venv() -> Path:
    """The peer's venv, built from its requirements the first time (a few minutes)."""
    uvicorn = PEER_VENV / "bin" / "uvicorn"
    if not uvicorn.exists():
        print(f"== building the peer's venv in {PEER_VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        requirements = refs_dir() / "peer" / "requirements.txt"
        subprocess.run(
            [str(PEER_VENV / "bin" / "pip"), "install", "-q", "-r", str(requirements)], check=True
        )
    return uvicorn


def _psql(statement: str) -> None:
    subprocess.run(
        ["psql", "-h", PG_HOST, "-U", "postgres", "-d", "postgres", "-qc", statement],
        check=True,
        capture_output=True,
    )


@contextmanager
def peer_server(workdir: Path) -> Iterator[Server]:
    """The FastAPI + Celery peer on a fresh database and Redis queue; both removed after."""
    uvicorn = ensure_peer_venv()
    name = f"peer_bench_{secrets.token_hex(4)}"
    _psql(f'CREATE DATABASE "{name}"')
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))},
        "PEER_DATABASE_URL": f"postgresql+asyncpg://postgres@{PG_HOST}:5432/{name}",
        "PEER_BROKER": "redis://127.0.0.1:6379/9",
        "PEER_QUEUE": name,
    }
    command = [
        str(uvicorn), "app:app", "--app-dir", str(refs_dir() / "peer"), "--host", "127.0.0.1",
        "--port", str(port), "--workers", "1", "--no-access-log",
    ]
    start = time.perf_counter()
    proc = _spawn(command, env=env, log=workdir / "peer.log")
    server = Server(proc, f"http://127.0.0.1:{port}", 0.0)
    try:
        wait_ready(server.url, proc)
        server.ready_after_s = time.perf_counter() - start
        yield server
    finally:
        server.stop()
        if shutil.which("redis-cli"):
            subprocess.run(["redis-cli", "-n", "9", "DEL", name], capture_output=True)
        _psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
