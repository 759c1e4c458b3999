"""A local directory as owned storage (``storage_url = "file:///abs/dir"``).

Writes are atomic (a temporary file in the target directory, then a rename), so a reader
never sees half a file and two writers of the same key leave one whole copy. Content
types are kept beside each file (``<name>.type``, hidden from reads). Blocking file I/O
runs in worker threads.

Durable (``[storage] fsync = true``, the default; docs/storage.md, "Durability"): before
a file is renamed into place its data (and its ``.type`` file's) is fsynced, and after
the rename its directory and each one above it up to the root are fsynced (their
entries, for directories the write made); so once ``put``, ``put_stream`` or
``put_file`` returns, the file survives a machine crash, and an output is recorded (a
prediction reported ``succeeded``) only after that. ``fsync = false``
leaves all of it to the kernel's write-back (about 30 s on Linux): faster, but a crash
of the machine may lose files of predictions already reported ``succeeded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import os
import secrets
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import BinaryIO

from gateway.storage.base import (
    CHUNK_BYTES,
    INCOMING,
    Digest,
    StoredObject,
    Written,
    check_key,
)

__all__ = ["LocalStorage"]

_TYPE_SUFFIX = ".type"


class LocalStorage:
    """Files under one directory; keys are relative paths without ``..``.

    ``fsync``: make each stored file durable before the call storing it returns (see
    the module's docstring); False leaves that to the kernel's write-back.
    """

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = root
        self.fsync = fsync

    def _resolve(self, key: str) -> Path:
        parts = check_key(key)
        if parts[-1].endswith(_TYPE_SUFFIX) or parts[-1].startswith(".tmp-"):
            raise ValueError(f"invalid storage key {key!r}")
        return self.root.joinpath(*parts)

    async def put(self, key: str, data: bytes, content_type: str = "") -> None:
        await asyncio.to_thread(self._write, self._resolve(key), data, content_type)

    def _write(self, target: Path, data: bytes, content_type: str) -> None:
        handle, tmp = self._open_temp(target)
        try:
            with handle:
                handle.write(data)
            self._commit(tmp, target, content_type)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @staticmethod
    def _open_temp(target: Path) -> tuple[BinaryIO, Path]:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        return os.fdopen(fd, "wb"), Path(tmp)

    def _commit(self, tmp: Path, target: Path, content_type: str) -> None:
        """Rename ``tmp`` (written and closed) to ``target``, its content type beside it;
        durably when :attr:`fsync` is on."""
        side = target.with_name(target.name + _TYPE_SUFFIX)
        if content_type:
            side.write_text(content_type)
            self._sync_file(side)
        else:
            side.unlink(missing_ok=True)
        self._sync_file(tmp)
        os.replace(tmp, target)
        self._sync_dirs(target)

    def _sync_file(self, path: Path) -> None:
        if self.fsync:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _sync_dirs(self, target: Path) -> None:
        """fsync the directories from ``target``'s up to the root: the rename's entry
        and those of directories the write may have made (cheap when unchanged)."""
        if self.fsync:
            directory = target.parent
            while True:
                self._sync_file(directory)
                if directory == self.root or directory == directory.parent:
                    break
                directory = directory.parent

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = "",
        max_bytes: int | None = None,
    ) -> Written:
        target = self._resolve(key)
        handle, tmp = await asyncio.to_thread(self._open_temp, target)
        digest = Digest(max_bytes)
        try:
            with handle:
                async for chunk in chunks:
                    digest.update(chunk)
                    await asyncio.to_thread(handle.write, chunk)
            await asyncio.to_thread(self._commit, tmp, target, content_type)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return digest.result()

    def temp_path(self) -> Path:
        incoming = self.root / INCOMING
        incoming.mkdir(parents=True, exist_ok=True)
        return incoming / secrets.token_hex(16)

    async def put_file(self, key: str, path: Path) -> None:
        target = self._resolve(key)
        await asyncio.to_thread(self._move, path, target)

    def _move(self, path: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        self._sync_file(path)
        os.replace(path, target)  # same file system: atomic, no copy
        self._sync_dirs(target)

    async def stat(self, key: str) -> StoredObject | None:
        try:
            target = self._resolve(key)
        except ValueError:
            return None
        return await asyncio.to_thread(self._stat, key, target)

    @staticmethod
    def _stat(key: str, target: Path) -> StoredObject | None:
        if not target.is_file():
            return None
        side = target.with_name(target.name + _TYPE_SUFFIX)
        content_type = side.read_text() if side.is_file() else ""
        content_type = content_type or mimetypes.guess_type(target.name)[0] or ""
        return StoredObject(
            key=key,
            size_bytes=target.stat().st_size,
            content_type=content_type or "application/octet-stream",
        )

    async def read(self, key: str) -> AsyncIterator[bytes]:
        try:
            target = self._resolve(key)
        except ValueError as exc:
            raise FileNotFoundError(key) from exc
        handle = await asyncio.to_thread(target.open, "rb")
        with handle:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk

    async def delete(self, key: str) -> None:
        try:
            target = self._resolve(key)
        except ValueError:
            return
        await asyncio.to_thread(self._remove, target)

    @staticmethod
    def _remove(target: Path) -> None:
        target.unlink(missing_ok=True)
        target.with_name(target.name + _TYPE_SUFFIX).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            target.parent.rmdir()  # only when empty

    async def presign(self, key: str, expires_s: float) -> str | None:
        return None

    def path(self, key: str) -> Path | None:
        """A local path to read ``key`` from, or None if it is not stored."""
        try:
            target = self._resolve(key)
        except ValueError:
            return None
        return target if target.is_file() else None

    async def aclose(self) -> None:
        return None

