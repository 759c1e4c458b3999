"""``cutover health --timeout S`` bounds the whole probe, not each socket operation: a
listener on 127.0.0.1 that answers one byte at a time, each well within the timeout and
the whole well over it, makes the probe fail in about S (gateway/healthcheck.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gateway import healthcheck

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
BYTE_EVERY_S = 0.1  # the whole answer takes about 7 s


@pytest.fixture
def dribbling_listener() -> Iterator[int]:
    """A port whose server reads a request, then sends :data:`ANSWER` byte by byte."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                for byte in ANSWER:
                    if stop.wait(BYTE_EVERY_S):
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_the_timeout_bounds_the_whole_probe(
    dribbling_listener: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CUTOVER_GATEWAY__LISTEN", f"127.0.0.1:{dribbling_listener}")
    started = time.monotonic()
    status = healthcheck.main(["--timeout", "1"])
    took = time.monotonic() - started
    assert status == 1
    assert took < 2.0, f"the probe took {took:.1f} s with --timeout 1"
    assert "cannot reach" in capsys.readouterr().err
