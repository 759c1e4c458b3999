"""A local S3-compatible server for tests: moto's server mode in a subprocess.

It listens on 127.0.0.1 on a port the kernel picks; the child prints that port on its
first line, so there is no bind-close-reuse race and no readiness sleep. It runs in its
own process so that the memory it uses to hold objects is not counted against the
gateway's (the bounded-memory test measures the test process). Credentials are moto's
dummies, set only in the child and passed explicitly to the gateway's storage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import TracebackType

from tests.support.orphans import die_with_parent

__all__ = ["S3Server"]

ACCESS_KEY_ID = "testing-key-id"  # moto accepts any credentials
SECRET_ACCESS_KEY = "testing-secret"

_CHILD = """
import sys, threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the parent closes our stdin (or dies)
server.stop()
"""


class S3Server:
    """moto's S3 on ``http://127.0.0.1:<port>``; use as a context manager."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> S3Server:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
               "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("CUTOVER_S3_SERVER_LOG") else subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=die_with_parent,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.isdigit():
            self.__exit__(None, None, None)
            raise RuntimeError("moto's S3 server did not start")
        self.port = int(line)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    def create_bucket(self, name: str) -> None:
        """Make ``name`` (boto3, synchronous: a test set-up step)."""
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        ).create_bucket(Bucket=name)
