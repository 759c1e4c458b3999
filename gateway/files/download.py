"""One output file downloaded to a local path at close to the network's speed (docs/storage.md).

The copy runs on threads of its own, not on the event loop: a receiving thread reads the
body in blocks of :data:`BLOCK_BYTES` with the standard library's blocking HTTP client and
writes each block to the file, while a second thread hashes the blocks it has written
(``hashlib`` and the socket release the GIL, so both overlap with each other and with the
event loop). Memory holds at most :data:`QUEUED_BLOCKS` + 2 blocks whatever the size.

A block goes to the file in ``write()`` calls of :data:`WRITE_BYTES` (16 KiB, what
``curl -o`` writes), not whole. The page cache takes folios as large as each write allows
(ext4's large folios, Linux 6.16+); on a VM whose balloon reports free memory to the host
(free page reporting, 2 MiB blocks) larger folios come from memory the host has to fault
back in. On the project's CI machine (a KVM guest, Linux 6.18) 1 GiB written in 4 MiB
calls took 2.9-3.7 s of system time, in 16 KiB calls 0.8-1.1 s, and writes of 32 KiB to
1 MiB showed the same spikes as 4 MiB (docs/benchmarks.md, "Output copy from a URL: the
size of each write()").

With ``write_back`` (the storage fsyncs what it stores, docs/storage.md "Durability"),
the hashing thread asks the kernel to start writing each hashed block to disk
(``posix_fadvise(POSIX_FADV_DONTNEED)``, which on Linux starts the write-back of a range's
dirty pages without waiting for it), so the disk works while the rest arrives and the
storage's fsync finds little left: after 1 GiB it took 0.00 s instead of 0.47-0.84 s,
for 0.07 s more CPU (docs/benchmarks.md, "Durable outputs: what fsync costs").

What the copier relies on (gateway/files/outputs.py): no redirect is followed and no proxy
from the environment is used (``http.client`` does neither); the type check runs on the
headers, before the body is read; a body over ``max_bytes`` (by its ``Content-Length``,
or as it arrives) is refused; the whole download has a deadline (each read's socket
timeout is what is left of it); cancelling the awaiting task shuts the socket down so
the threads stop at once, and the receiving thread removes the file it may have created
meanwhile (docs/storage.md, "Uploads cancelled mid-write").

Downloads and spools (uploads) run on two pools of threads: :data:`MAX_DOWNLOADS`
receiving threads, each held for as long as its body takes to arrive (minutes for a large
file from a slow host), and :data:`SPOOL_THREADS` for a spool's short jobs (a block's
write, the close, a discard), so an upload and the clean-up of a cancelled one never
wait behind downloads (docs/storage.md, "Threads").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import http.client
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from adapters.tls import client_context

__all__ = [
    "BLOCK_BYTES", "WRITE_BYTES", "DownloadFailed", "Downloaded", "Spool", "download", "remove",
]

BLOCK_BYTES = 4 << 20  # one read, one hash update
WRITE_BYTES = 16 << 10  # one write() to the file (see the module's docstring)
QUEUED_BLOCKS = 2  # blocks written and waiting for the hashing thread
SPOOL_BLOCK_BYTES = 1 << 20  # an upload's block: its small chunks are joined (copied) first
MAX_DOWNLOADS = 8  # downloads running at once in one process; more wait for a thread
SPOOL_THREADS = 4  # spools' block writes, closes and discards at once (docs/storage.md)


class DownloadFailed(Exception):
    """The file could not be downloaded; the message says why, for the prediction's error."""


@dataclass(frozen=True)
class Downloaded:
    """A downloaded file: its content type (as ``accept`` returned it), SHA-256 and size."""

    content_type: str
    sha256: str
    size: int


async def download(
    url: str,
    path: Path,
    *,
    max_bytes: int,
    timeout_s: float,
    accept: Callable[[str], str],
    write_back: bool = False,
) -> Downloaded:
    """GET ``url`` into ``path``, hashing as it is written.

    ``accept(raw content type header)`` returns the content type to record, or raises to
    refuse the file before its body is read (its exception propagates unchanged).
    ``write_back``: start writing each block to disk as it is hashed (for a file about
    to be fsynced; see the module's docstring).

    Raises
    ------
    DownloadFailed
        Not a 200, over ``max_bytes``, or a transport failure.
    TimeoutError
        ``timeout_s`` passed before the body was read whole.
    """
    job = _Job(url, path, max_bytes, time.monotonic() + timeout_s, accept, write_back)
    future = asyncio.get_running_loop().run_in_executor(_threads("download"), job.run)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        job.abort()
        with contextlib.suppress(Exception):
            await future  # the threads have closed the file before the caller removes it
        raise


async def remove(path: Path) -> None:
    """Remove the temp file ``path`` (if there) on a worker thread, to the end even when
    the caller is cancelled meanwhile: a removal merely queued by ``asyncio.to_thread``
    was cancelled with its caller, and the file stayed (docs/storage.md, "Uploads
    cancelled mid-write")."""
    await asyncio.shield(asyncio.to_thread(path.unlink, missing_ok=True))


@functools.cache
def _threads(kind: Literal["download", "spool"]) -> ThreadPoolExecutor:
    """The process's pool for downloads, or for spools' jobs (see the module docstring):
    a spool's job must never queue behind downloads that hold their threads for minutes."""
    size = MAX_DOWNLOADS if kind == "download" else SPOOL_THREADS
    return ThreadPoolExecutor(size, thread_name_prefix=f"cutover-{kind}")


class _Hasher:
    """Hashes blocks on a thread of its own, at most :data:`QUEUED_BLOCKS` behind.

    With ``fd`` (the file the blocks were written to, in order, from its start), each
    hashed block's range is handed to the kernel's write-back; ``fd`` must stay open
    until :meth:`result` returns.
    """

    def __init__(self, fd: int | None = None) -> None:
        self._digest = hashlib.sha256()
        self._blocks: queue.Queue[bytes | None] = queue.Queue(QUEUED_BLOCKS)
        self._fd = fd
        self._thread = threading.Thread(target=self._run, name="cutover-hash", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        offset = 0
        while (block := self._blocks.get()) is not None:
            self._digest.update(block)
            if self._fd is not None:
                with contextlib.suppress(OSError):  # advice: a file system may not take it
                    os.posix_fadvise(self._fd, offset, len(block), os.POSIX_FADV_DONTNEED)
                offset += len(block)

    def add(self, block: bytes) -> None:
        self._blocks.put(block)

    def result(self) -> str:
        self._blocks.put(None)
        self._thread.join()
        return self._digest.hexdigest()


class _Job:
    def __init__(
        self,
        url: str,
        path: Path,
        max_bytes: int,
        deadline: float,
        accept: Callable[[str], str],
        write_back: bool,
    ) -> None:
        self.url = url
        self.path = path
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.accept = accept
        self.write_back = write_back
        self._sock: socket.socket | None = None
        self._aborted = False

    def abort(self) -> None:
        """Stop the download from another thread: the blocked read returns at once."""
        self._aborted = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self._aborted:
            raise TimeoutError("the download's deadline passed")
        return left

    def run(self) -> Downloaded:
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise DownloadFailed("InvalidURL")
        conn = _connection(parts.scheme, parts.hostname, parts.port, self._left())
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            try:
                conn.connect()
                self._sock = conn.sock
                if self._aborted:
                    raise TimeoutError("aborted")
                conn.request("GET", target, headers={"Accept-Encoding": "identity"})
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                if isinstance(exc, TimeoutError):
                    raise
                raise DownloadFailed(type(exc).__name__) from exc
            if response.status != 200:
                raise DownloadFailed(f"HTTP {response.status}")
            content_type = self.accept(response.getheader("content-type", ""))
            length = response.getheader("content-length", "")
            if length.isdigit() and int(length) > self.max_bytes:
                raise DownloadFailed(f"an output file exceeds the limit of {self.max_bytes} bytes")
            sha256, size = self._body(response)
            if length.isdigit() and size != int(length):
                self._left()  # an abort reads as the deadline
                raise DownloadFailed("IncompleteRead")
            return Downloaded(content_type, sha256, size)
        finally:
            conn.close()
            if self._aborted:  # the caller is gone, maybe before the file was created
                with contextlib.suppress(OSError):
                    self.path.unlink(missing_ok=True)

    def _body(self, response: http.client.HTTPResponse) -> tuple[str, int]:
        size = 0
        with self.path.open("wb", buffering=0) as handle:
            hasher = _Hasher(handle.fileno() if self.write_back else None)
            try:
                while True:
                    left = self._left()
                    if self._sock is not None:
                        with contextlib.suppress(OSError):  # closed by the server
                            self._sock.settimeout(left)
                    try:
                        block = response.read(BLOCK_BYTES)
                    except TimeoutError:
                        raise
                    except (OSError, http.client.HTTPException) as exc:
                        self._left()  # an abort reads as the deadline
                        raise DownloadFailed(type(exc).__name__) from exc
                    if not block:
                        break
                    size += len(block)
                    if size > self.max_bytes:
                        raise DownloadFailed(
                            f"an output file exceeds the limit of {self.max_bytes} bytes"
                        )
                    _write(handle, block)
                    hasher.add(block)
            finally:
                sha256 = hasher.result()  # before the file (its fd) is closed
        return sha256, size


def _write(handle: Any, block: bytes) -> None:
    """``block`` into ``handle`` (an unbuffered file) in writes of at most
    :data:`WRITE_BYTES`, each repeated from where a short write stopped."""
    view = memoryview(block)
    while view:
        view = view[handle.write(view[:WRITE_BYTES]) :]


def _connection(scheme: str, host: str, port: int | None, timeout_s: float) -> Any:
    if scheme == "https":
        context = client_context(trust_env=False)  # certifi's: no environment
        return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


class Spool:
    """A body arriving on the event loop (an upload), written to ``path`` and hashed on
    threads, at most one block behind: the loop keeps receiving while the last block is
    written. Memory holds a few blocks of ``block_bytes`` whatever the size.

    Raises :class:`DownloadFailed` from :meth:`write` past ``max_bytes``; after any
    failure or cancellation the caller calls :meth:`discard`, which closes and removes
    ``path`` (docs/storage.md, "Uploads cancelled mid-write"). ``write_back`` as for
    :func:`download`.
    """

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        block_bytes: int = SPOOL_BLOCK_BYTES,
        *,
        write_back: bool = False,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.block_bytes = block_bytes
        self.write_back = write_back
        self.size = 0
        self._chunks: list[bytes] = []
        self._pending_bytes = 0
        self._handle: Any = None
        self._hasher: _Hasher | None = None
        # The last job handed to a thread (a block's write, then the close): the thread's
        # own future, whose state a cancelled awaiting task does not change once it runs.
        self._job: Future[Any] | None = None

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise DownloadFailed(f"an output file exceeds the limit of {self.max_bytes} bytes")
        self._chunks.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= self.block_bytes:
            await self._flush()

    async def _wait(self) -> Any:
        return None if self._job is None else await asyncio.wrap_future(self._job)

    async def _flush(self) -> None:
        await self._wait()
        block, self._chunks, self._pending_bytes = self._chunks, [], 0
        self._job = _threads("spool").submit(self._write_block, block)

    def _write_block(self, chunks: list[bytes]) -> None:
        if self._handle is None:
            self._open()
        block = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        _write(self._handle, block)
        assert self._hasher is not None
        self._hasher.add(block)

    async def finish(self) -> str:
        """Write what is left, close the file; its SHA-256 (hex)."""
        await self._flush()
        await self._wait()
        self._job = _threads("spool").submit(self._close)
        return str(await self._wait())

    def _open(self) -> None:
        self._handle = self.path.open("wb", buffering=0)
        self._hasher = _Hasher(self._handle.fileno() if self.write_back else None)

    def _close(self) -> str:
        if self._handle is None:  # an empty body
            self._open()
        assert self._hasher is not None
        try:
            return self._hasher.result()  # before the file (its fd) is closed
        finally:
            self._handle.close()

    async def discard(self) -> None:
        """Stop after a failure or a cancellation: once the thread's job (a write, the
        close) has returned, close the file, end the hashing thread and remove ``path``.

        That runs on a thread to its end even if the awaiting task is cancelled (again),
        so no cancellation point leaves the file open or the hashing thread waiting.
        """
        job = _threads("spool").submit(self._discard, self._job)
        await asyncio.shield(asyncio.wrap_future(job))

    def _discard(self, last: Future[Any] | None) -> None:
        if last is not None:
            wait([last])  # queued before this job: running or done (or cancelled unrun)
        if self._handle is not None and not self._handle.closed:
            with contextlib.suppress(OSError):
                self._close()
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
