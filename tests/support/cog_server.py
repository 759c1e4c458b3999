"""Run the real Cog server (coglet 0.23.1) as a subprocess for tests.

The command is the one README.md gives ("Running Cog behind cutover")::

    PATH=<venv bin>:$PATH PORT=<port> COG_PREDICT_TYPE_STUB=predict.py:Predictor \
        <python> -m cog.server.http --host 127.0.0.1

run in the model's directory. coglet starts its worker as ``python -c ...`` found on
``PATH``, so the venv's ``bin`` must come first or the worker dies with
``ModuleNotFoundError: coglet`` and the server never gets READY.
The server gets its own process group (its worker included), its own ``TMPDIR`` (Cog
writes inputs and outputs there, the echo model its files) and a log file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from tests.support.orphans import die_with_parent

__all__ = ["CogServer", "CogServerError"]

_POLL_INTERVAL_S = 0.1


class CogServerError(RuntimeError):
    """The server did not start, or died; the message ends with its log tail."""


class CogServer:
    """One real Cog server on a free port of 127.0.0.1.

    Parameters
    ----------
    model_dir : Path
        A directory holding ``predict.py`` with a ``Predictor`` class.
    env : mapping or None
        Extra environment for the server, e.g. ``WEBHOOK_AUTH_TOKEN`` or
        ``SSL_CERT_FILE``.
    python : str
        The interpreter to run; its directory goes first on ``PATH``.
    port : int or None
        The port to listen on (to restart a server where it was); a free one if None.
    args : sequence of str
        More command-line options, e.g. ``["--upload-url", url]``.

    Use as a context manager (start, wait until READY, stop), or call :meth:`start`,
    :meth:`wait_ready` and :meth:`stop` yourself.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        port: int | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.model_dir = Path(model_dir)
        self._args = list(args)
        self.port: int | None = port
        self._extra_env = dict(env or {})
        self._python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._last_log = ""

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; only after :meth:`start`."""
        if self.port is None:
            raise CogServerError("the Cog server was not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The server's combined stdout/stderr, while it runs."""
        return None if self._workdir is None else self._workdir / "cog.log"

    def start(self) -> None:
        """Spawn the server in its own process group; does not wait for READY."""
        if self._proc is not None:
            raise CogServerError("the Cog server is already started")
        self._workdir = Path(tempfile.mkdtemp(prefix="cutover-cog-"))
        tmp = self._workdir / "tmp"
        tmp.mkdir()
        self.port = self.port or _free_port()
        bin_dir = str(Path(self._python).parent)
        env = {
            **os.environ,
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PORT": str(self.port),
            "COG_PREDICT_TYPE_STUB": "predict.py:Predictor",
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            **self._extra_env,
        }
        command = [self._python, "-m", "cog.server.http", "--host", "127.0.0.1", *self._args]
        with open(self._workdir / "cog.log", "wb") as log:
            self._proc = subprocess.Popen(
                command,
                cwd=self.model_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Poll ``GET /health-check`` until ``status == "READY"`` (§1.8).

        Raises
        ------
        CogServerError
            The process exited, setup failed, or ``timeout_s`` seconds passed.
        """
        proc = self._require_proc()
        deadline = time.monotonic() + timeout_s
        status = "no answer"
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                status = _health(client)
                if status == "READY":
                    return
                if status in ("SETUP_FAILED", "DEFUNCT"):
                    break
                try:
                    proc.wait(timeout=_POLL_INTERVAL_S)  # also notices an early exit
                except subprocess.TimeoutExpired:
                    continue
                break
        raise CogServerError(
            f"Cog server not READY (last status: {status}, exit code: {proc.poll()})\n"
            + self.log_tail()
        )

    def health(self) -> str:
        """The current ``status`` of ``GET /health-check`` ("no answer" if unreachable)."""
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            return _health(client)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to ``timeout_s``, then SIGKILL it.

        Returns the exit code (None if it was never started). Removes the temporary
        directory; :meth:`log_tail` still answers from memory.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        try:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
            _signal_group(proc.pid, signal.SIGKILL)  # a worker left behind, if any
        finally:
            self._last_log = self._read_log()
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
        return proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        text = self._read_log() if self._workdir is not None else self._last_log
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> CogServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _require_proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise CogServerError("the Cog server was not started")
        return self._proc

    def _read_log(self) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return self._last_log
        return path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health(client: httpx.Client) -> str:
    try:
        return str(client.get("/health-check").json().get("status"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return "no answer"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
