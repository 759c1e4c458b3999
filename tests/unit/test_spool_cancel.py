"""An upload cancelled mid-write (client gone, shutdown) leaves nothing behind: no temp
file, no open descriptor, no hashing thread waiting for a block (gateway/download.py
:class:`Spool`, gateway/uploads.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gateway.download
from gateway.download import SPOOL_BLOCK_BYTES
from gateway.storage.local import LocalStorage
from gateway.uploads import Uploads


def _open_under(root: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            found.append(target)
    return found


def _hashers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cutover-hash" and t.is_alive()]


@pytest.mark.parametrize("cancels", [1, 2], ids=["cancelled-writing", "cancelled-discarding"])
async def test_a_cancelled_upload_closes_removes_and_releases_its_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancels: int
) -> None:
    gate = threading.Event()
    real_write = gateway.download._write

    def slow_write(handle: Any, block: bytes) -> None:
        gate.wait(10)  # the first block is still being written when the task is cancelled
        real_write(handle, block)

    monkeypatch.setattr(gateway.download, "_write", slow_write)
    storage = LocalStorage(tmp_path / "assets", fsync=True)
    copier = SimpleNamespace(max_output_bytes=1 << 30, accept=lambda raw: raw)
    uploads = Uploads(copier=copier, storage=storage, store=None, tokens={})  # type: ignore[arg-type]
    before = set(_hashers())
    reading = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield bytes(SPOOL_BLOCK_BYTES)  # written on a thread (held by the gate)
        yield bytes(SPOOL_BLOCK_BYTES)  # waits for the first block's write
        reading.set()
        await asyncio.Event().wait()
        yield b""

    task = asyncio.create_task(uploads.receive("j1", "out.bin", "image/png", None, body()))
    await asyncio.sleep(0.2)  # the second block waits for the first's write
    assert not task.done()
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.05)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task

    deadline = time.monotonic() + 5
    incoming = tmp_path / "assets"
    while time.monotonic() < deadline:
        leftovers = [p for p in incoming.rglob("*") if p.is_file()]
        if not leftovers and not _open_under(incoming) and set(_hashers()) <= before:
            break
        await asyncio.sleep(0.05)
    assert [p for p in incoming.rglob("*") if p.is_file()] == []
    assert _open_under(incoming) == []
    assert set(_hashers()) <= before


async def test_a_download_cancelled_twice_leaves_no_temp_file(tmp_path: Path) -> None:
    """The caller removes the file once cancelled; a second cancellation used to let it
    do so before the download's thread had created the file, which then stayed."""
    server = socket.create_server(("127.0.0.1", 0))
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 10\r\n\r\n"

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)
            time.sleep(2)  # the body never comes in time

    threading.Thread(target=serve, daemon=True).start()
    checking, release = threading.Event(), threading.Event()

    def accept(raw: str) -> str:  # on the download's thread, before the file is opened
        checking.set()
        release.wait(5)
        return raw

    path = tmp_path / "incoming"
    port = server.getsockname()[1]

    async def copy() -> None:
        try:
            await gateway.download.download(
                f"http://127.0.0.1:{port}/out.png", path, max_bytes=1 << 20, timeout_s=10,
                accept=accept,
            )
        except BaseException:
            await asyncio.to_thread(path.unlink, missing_ok=True)  # as gateway/outputs.py
            raise

    task = asyncio.create_task(copy())
    await asyncio.to_thread(checking.wait, 5)
    for _ in range(2):
        task.cancel()
        await asyncio.sleep(0.05)
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.sleep(0.5)  # the thread goes on to open the file, then sees the abort
    server.close()
    assert not path.exists()
    assert _open_under(tmp_path) == []


async def test_an_upload_cancelled_twice_while_cleaning_up_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled while the file is moved into storage, then again while the temp file
    is removed: the removal, queued on a worker thread, was cancelled with the task
    before it ran (``asyncio.to_thread``), and the temp file stayed."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))  # busy: a job queued there waits
    storage = LocalStorage(tmp_path / "assets", fsync=False)
    moving = asyncio.Event()

    async def put_file(key: str, path: Path) -> None:
        moving.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(storage, "put_file", put_file)
    copier = SimpleNamespace(max_output_bytes=1 << 30, accept=lambda raw: raw)
    uploads = Uploads(copier=copier, storage=storage, store=None, tokens={})  # type: ignore[arg-type]

    async def body() -> AsyncIterator[bytes]:
        yield b"an output file"

    task = asyncio.create_task(uploads.receive("j1", "out.bin", "image/png", None, body()))
    await asyncio.wait_for(moving.wait(), 5)
    gate = threading.Event()
    busy = loop.run_in_executor(None, gate.wait, 5)
    task.cancel()  # the move is given up; the temp file's removal is queued
    await asyncio.sleep(0.05)
    task.cancel()  # ... and cancelled before a thread took it
    gate.set()
    await busy
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)
    assert [p for p in (tmp_path / "assets").rglob("*") if p.is_file()] == []
