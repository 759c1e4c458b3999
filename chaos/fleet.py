"""Gateway processes of a chaos run: started with ``cutover serve``, killed, restarted.

The chaos package drives the gateway from outside, as an app and a provider would: it
writes a configuration file, runs ``python -m gateway.cli serve`` in a process group of
its own (so SIGKILL takes the whole process, as a crash would) and talks to it over HTTP
only. Each process keeps its port across restarts and appends to one log file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import tomli_w

__all__ = ["Fleet", "GatewayProcess", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GatewayProcess:
    """One ``cutover serve`` process; ``config`` is the whole configuration as a dict."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str) -> None:
        self.config = config
        self.name = name
        self.config_path = workdir / f"{name}.toml"
        self.log_path = workdir / f"{name}.log"
        self.kills = 0
        self.down_s = 0.0
        self._killed_at: float | None = None
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return str(self.config["gateway"]["public_url"])

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start the process and wait until ``GET /health`` answers 200."""
        self.config_path.write_bytes(tomli_w.dumps(self.config).encode())
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
        with self.log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "serve", "--config", str(self.config_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, env=env,
            )
        await self._wait_healthy(timeout_s)
        if self._killed_at is not None:
            self.down_s += time.monotonic() - self._killed_at
            self._killed_at = None

    async def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise RuntimeError(f"gateway {self.name} exited:\n{self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(f"{self.url}/health") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"gateway {self.name} not healthy in {timeout_s} s:\n{self.log_tail()}")

    async def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, as in a crash."""
        if self._proc is None:
            return
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self.kills += 1
            self._killed_at = time.monotonic()
        await self._proc.wait()

    async def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
        if self._proc is None or self._proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self._proc.wait(), timeout_s)
        except TimeoutError:
            await self.kill()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class Fleet:
    """Several gateway processes sharing one configuration (and so one database)."""

    def __init__(self, config: dict[str, Any], workdir: Path, size: int) -> None:
        self.processes = []
        for index in range(size):
            port = free_port()
            own = {**config, "gateway": {
                **config["gateway"], "listen": f"127.0.0.1:{port}",
                "public_url": f"http://127.0.0.1:{port}",
            }}
            self.processes.append(GatewayProcess(own, workdir, f"gateway-{index}"))

    @property
    def down_s(self) -> float:
        """Seconds any gateway process spent killed, until it was healthy again."""
        return sum(p.down_s for p in self.processes)

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.processes]

    async def start(self) -> None:
        for process in self.processes:  # one at a time: the first one migrates
            await process.start()

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop() for p in self.processes))

    def log_text(self) -> str:
        return "\n".join(p.log_text() for p in self.processes)
