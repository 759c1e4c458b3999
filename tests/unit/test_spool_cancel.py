"""An upload cancelled mid-write (client gone, shutdown) leaves nothing behind: no temp
file, no open descriptor, no hashing thread waiting for a block (gateway/files/download.py
:class:`Spool`, gateway/files/uploads.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gateway.files.download
from gateway.files.download import SPOOL_BLOCK_BYTES
from gateway.files.uploads import Uploads
from gateway.storage.local import LocalStorage
from tests.support.waiting import wait_until


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


def _flag(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> asyncio.Event:
    """An event set when the coroutine method ``owner.name`` is entered: it then runs on
    without a pause up to its first wait, so a test resuming on the event finds it there."""
    entered = asyncio.Event()
    real = getattr(owner, name)

    async def flagged(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, flagged)
    return entered


@pytest.mark.parametrize("cancels", [1, 2], ids=["cancelled-writing", "cancelled-discarding"])
async def test_a_cancelled_upload_closes_removes_and_releases_its_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancels: int
) -> None:
    gate, writing = threading.Event(), threading.Event()
    real_write = gateway.files.download._write

    def slow_write(handle: Any, block: bytes) -> None:
        writing.set()
        gate.wait(10)  # the first block is still being written when the task is cancelled
        real_write(handle, block)

    monkeypatch.setattr(gateway.files.download, "_write", slow_write)
    storage = LocalStorage(tmp_path / "assets", fsync=True)
    copier = SimpleNamespace(max_output_bytes=1 << 30, accept=lambda raw: raw)
    uploads = Uploads(copier=copier, storage=storage, store=None, tokens={})  # type: ignore[arg-type]
    before = set(_hashers())
    second = asyncio.Event()
    discarding = _flag(monkeypatch, gateway.files.download.Spool, "discard")

    async def body() -> AsyncIterator[bytes]:
        yield bytes(SPOOL_BLOCK_BYTES)  # written on a thread (held by the gate)
        second.set()
        yield bytes(SPOOL_BLOCK_BYTES)  # waits for the first block's write
        await asyncio.Event().wait()
        yield b""

    task = asyncio.create_task(uploads.receive("j1", "out.bin", "image/png", None, body()))
    await asyncio.wait_for(second.wait(), 5)  # the second block waits for the first's write
    assert await asyncio.to_thread(writing.wait, 5)
    assert not task.done()
    task.cancel()  # while the first block is written
    await asyncio.wait_for(discarding.wait(), 5)
    if cancels == 2:
        task.cancel()  # again, while the spool is discarded (waiting for that write)
        await asyncio.wait([task], timeout=5)  # the task is gone before the write ends
        assert task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task

    incoming = tmp_path / "assets"
    await wait_until(
        lambda: not [p for p in incoming.rglob("*") if p.is_file()]
        and not _open_under(incoming) and set(_hashers()) <= before,
        5, what="the spool's file removed and closed, its hashing thread ended",
    )
    assert [p for p in incoming.rglob("*") if p.is_file()] == []
    assert _open_under(incoming) == []
    assert set(_hashers()) <= before


async def test_a_download_cancelled_twice_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller removes the file once cancelled; a second cancellation used to let it
    do so before the download's thread had created the file, which then stayed."""
    server = socket.create_server(("127.0.0.1", 0))
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 10\r\n\r\n"
    hold = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)
            hold.wait(5)  # the body never comes in time

    threading.Thread(target=serve, daemon=True).start()
    checking, release = threading.Event(), threading.Event()

    def accept(raw: str) -> str:  # on the download's thread, before the file is opened
        checking.set()
        release.wait(5)
        return raw

    path = tmp_path / "incoming"
    port = server.getsockname()[1]
    aborted = asyncio.Event()
    real_abort, real_run = gateway.files.download._Job.abort, gateway.files.download._Job.run
    ended = threading.Event()

    def abort(job: Any) -> None:  # then download() waits for the thread, cancellable
        real_abort(job)
        aborted.set()

    def run(job: Any) -> Any:
        try:
            return real_run(job)
        finally:
            ended.set()  # after the thread's own clean-up

    monkeypatch.setattr(gateway.files.download._Job, "abort", abort)
    monkeypatch.setattr(gateway.files.download._Job, "run", run)

    async def copy() -> None:
        try:
            await gateway.files.download.download(
                f"http://127.0.0.1:{port}/out.png", path, max_bytes=1 << 20, timeout_s=10,
                accept=accept,
            )
        except BaseException:
            await asyncio.to_thread(path.unlink, missing_ok=True)  # as gateway/files/outputs.py
            raise

    task = asyncio.create_task(copy())
    assert await asyncio.to_thread(checking.wait, 5)
    task.cancel()
    await asyncio.wait_for(aborted.wait(), 5)
    task.cancel()  # while download() waits for its thread: the caller removes the file
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()  # the thread goes on to open the file, then sees the abort
    assert await asyncio.to_thread(ended.wait, 5)
    hold.set()
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

    given_up = asyncio.Event()

    async def put_file(key: str, path: Path) -> None:
        moving.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            given_up.set()  # the removal is queued before the task pauses again
            raise

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
    await asyncio.wait_for(given_up.wait(), 5)
    task.cancel()  # ... and cancelled before a thread took it
    gate.set()
    await busy
    with pytest.raises(asyncio.CancelledError):
        await task
    await loop.run_in_executor(None, lambda: None)  # one thread: every job queued ran
    assert [p for p in (tmp_path / "assets").rglob("*") if p.is_file()] == []
