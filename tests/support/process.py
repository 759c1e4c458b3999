"""The gateway as a real subprocess (``cutover serve --config FILE``), for end-to-end tests.

Used where the process boundary matters: the real ``replicate`` client over HTTPS, a
SIGKILL in the middle of work, several gateway processes on one database.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import tomli_w

from tests.support.orphans import die_with_parent

__all__ = ["GatewayProcess", "free_port", "listen_port"]

#: Port -> the listening socket held for it (for the whole session: a restarted gateway
#: gets the same socket again).
_HELD: dict[int, socket.socket] = {}


def listen_port() -> int:
    """A port on 127.0.0.1 for a gateway: bound (port 0) and listening here, and handed
    to ``cutover serve --listen-fd`` by :class:`GatewayProcess`, so no other process can
    take it between the choice and the bind (no bind-close-reuse race)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = int(sock.getsockname()[1])
    _HELD[port] = sock
    return port


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a server that cannot be
    handed a socket (RunPod's dev server): it may be taken before that server binds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GatewayProcess:
    """One gateway process with its own config file and log.

    Parameters
    ----------
    config : dict
        The whole configuration (written as TOML).
    workdir : Path
        Where the config file and log go.
    ca_file : Path, optional
        The CA to trust when probing an HTTPS gateway.
    env : dict, optional
        ``CUTOVER_*`` overrides for the process (the test's own ``CUTOVER_*`` variables
        are never passed on); ``url`` is still the config's ``public_url``.
    wrapper : list of str, optional
        A command the ``cutover`` script runs under, e.g. ``[python,
        "bench/support/cpuprofile.py", FILE]`` (bench/e2e.py ``--profile``).
    """

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        ca_file: Path | None = None,
        env: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
    ):
        self.config = config
        self.workdir = workdir
        self.ca_file = ca_file
        self.env = env or {}
        self.wrapper = wrapper or []
        self.config_path = workdir / f"cutover-{id(self):x}.toml"
        self.log_path = workdir / f"gateway-{id(self):x}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return str(self.config["gateway"]["public_url"])

    @property
    def pid(self) -> int:
        """The running gateway's process id (for its CPU time in /proc)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

    def start(self, timeout_s: float = 30.0) -> GatewayProcess:
        """Write the config, start the process, and wait until ``/health`` answers."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_bytes(tomli_w.dumps(self.config).encode())
        command = shutil.which("cutover", path=str(Path(sys.executable).parent))
        assert command, "the cutover console script is not installed in this venv"
        argv = [*self.wrapper, command, "serve", "--config", str(self.config_path)]
        held = _HELD.get(int(str(self.config["gateway"]["listen"]).rpartition(":")[2]))
        fds = () if held is None else (held.fileno(),)
        argv += [f"--listen-fd={fd}" for fd in fds]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv,
                pass_fds=fds,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={
                    **{k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")},
                    **self.env,
                },
            )
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        verify: Any = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else True
        with httpx.Client(verify=verify, timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise RuntimeError(f"gateway exited early:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"gateway not healthy within {timeout_s} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the process group: no cleanup, as in a crash."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
