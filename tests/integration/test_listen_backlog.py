"""A burst of new connections waits in the gateway's accept queue, not in SYN retries.

aiohttp's accept queue is 128 deep unless told otherwise. Past it Linux drops the SYN and
the client sends it again a second later (then after 3 s, 7 s...): 2,000 callers starting
at once saw first polls of over a second (docs/benchmarks.md, "`make bench` at the
merged issue-23 work"). ``[gateway] listen_backlog`` (1,024) is the queue's depth, for a
socket the gateway binds itself and for one it inherits (``--listen-fd``; the test
harness binds its sockets with 128).

The gateway is stopped (SIGSTOP) so that it accepts nothing while 600 clients connect:
each handshake completes only if the kernel's queue holds it.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.process import GatewayProcess, free_port, listen_port

CLIENTS = 600  # over aiohttp's 128, under the 1,024 default
HANDSHAKE_S = 0.5  # a dropped SYN is sent again after 1 s: anything queued is done well before


def _somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


pytestmark = pytest.mark.skipif(
    not Path("/proc/sys/net/core/somaxconn").exists() or _somaxconn() < 1024,
    reason="net.core.somaxconn below 1,024 caps every accept queue",
)


def _config(port: int, tmp_path: Path) -> dict[str, Any]:
    return {"gateway": {
        "listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'cutover.db'}",
        "storage_url": f"file://{tmp_path / 'assets'}", "api_tokens": ["t-backlog"],
    }}


def _handshakes(port: int) -> int:
    """How many of CLIENTS non-blocking connects to ``port`` complete within HANDSHAKE_S."""
    selector = selectors.DefaultSelector()
    socks = []
    try:
        for _ in range(CLIENTS):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
            socks.append(sock)
        done, deadline = 0, time.monotonic() + HANDSHAKE_S
        while done < CLIENTS and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                selector.unregister(key.fileobj)
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    done += 1
        return done
    finally:
        selector.close()
        for sock in socks:
            sock.close()


@pytest.fixture(params=["inherited", "bound"])
def stopped_gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    """The port of a started gateway, stopped (SIGSTOP) until the test ends."""
    port = listen_port() if request.param == "inherited" else free_port()
    gateway = GatewayProcess(_config(port, tmp_path), tmp_path).start()
    os.kill(gateway.pid, signal.SIGSTOP)
    try:
        yield port
    finally:
        os.kill(gateway.pid, signal.SIGCONT)
        gateway.stop()


def test_a_burst_over_128_connections_is_queued_while_the_gateway_is_busy(
    stopped_gateway: int,
) -> None:
    assert _handshakes(stopped_gateway) == CLIENTS
