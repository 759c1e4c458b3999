"""Owned storage for output files: a local directory (``file://``) for now.

Keys are chosen by the gateway (``<prediction id>/<sha256 prefix>/<name>``), so two
finalizers copying the same output write the same bytes to the same key. Writes are
atomic (temporary file, then rename).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from contracts.errors import ConfigurationError

__all__ = ["INCOMING", "LocalStorage", "Storage", "open_storage"]

INCOMING = ".incoming"  # the directory of files being downloaded, under the root


class Storage(Protocol):
    """Where output files live once the gateway owns them."""

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (overwriting identical content is harmless)."""
        ...

    def temp_path(self) -> Path:
        """A new, unguessable local path to spool an incoming file to (then
        :meth:`put_file`); on the storage's own file system where it has one."""
        ...

    async def put_file(self, key: str, path: Path) -> None:
        """Store the file at ``path`` (from :meth:`temp_path`) under ``key``; the file is
        moved or copied, and the caller removes whatever is left at ``path``."""
        ...

    def path(self, key: str) -> Path | None:
        """A local path to read ``key`` from, or None if it is not stored."""
        ...


class LocalStorage:
    """Files under one directory; keys are relative paths without ``..``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _resolve(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in {"", ".", ".."} for p in parts) or key.startswith("/"):
            raise ValueError(f"invalid storage key {key!r}")
        return self.root.joinpath(*parts)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._write, self._resolve(key), data)

    @staticmethod
    def _write(target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def temp_path(self) -> Path:
        incoming = self.root / INCOMING
        incoming.mkdir(parents=True, exist_ok=True)
        return incoming / secrets.token_hex(16)

    async def put_file(self, key: str, path: Path) -> None:
        target = self._resolve(key)
        await asyncio.to_thread(self._move, path, target)

    @staticmethod
    def _move(path: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)  # same file system: atomic, no copy

    def path(self, key: str) -> Path | None:
        if key.startswith(INCOMING):
            return None  # files still arriving are nobody's asset
        try:
            target = self._resolve(key)
        except ValueError:
            return None
        return target if target.is_file() else None


def open_storage(storage_url: str) -> Storage:
    """The storage named by ``storage_url``: ``file:///abs/dir`` or ``file://./rel/dir``.

    Raises
    ------
    ConfigurationError
        For a scheme other than ``file``.
    """
    parts = urlsplit(storage_url)
    if parts.scheme != "file":
        raise ConfigurationError(
            f"storage_url {storage_url!r} is not supported; use file:///path/to/dir"
        )
    raw = parts.netloc + parts.path if parts.netloc else parts.path
    return LocalStorage(Path(raw).expanduser().resolve())
