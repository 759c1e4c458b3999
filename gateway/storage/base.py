"""The owned-storage port: what every backend (local directory, S3 bucket) offers.

Keys are chosen by the gateway (``<prediction id>/<sha256 prefix>/<name>``,
``files/<file id>/<name>``): relative, ``/``-separated, never ``..``. Bytes go in whole
(:meth:`Storage.put`, small files) or as a stream of chunks (:meth:`Storage.put_stream`,
never held whole in memory), and come out as a stream of chunks. One contract suite
(``tests/integration/test_storage_contract.py``) runs against every backend; see
docs/storage.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contracts.errors import CutoverError

__all__ = [
    "CHUNK_BYTES",
    "INCOMING",
    "Digest",
    "Storage",
    "StorageTooLarge",
    "StoredObject",
    "Written",
    "check_key",
]

CHUNK_BYTES = 1 << 16
INCOMING = ".incoming"  # files being downloaded (local spool), never an asset key


PART_SIZE_BYTES = 8 * 1024 * 1024
"""Default size of one S3 multipart upload part (``[storage] part_size_bytes``)."""
MIN_PART_BYTES = 5 * 1024 * 1024
"""S3's smallest part (every part but the last)."""

class StorageTooLarge(CutoverError):
    """A streamed object passed the caller's ``max_bytes``; nothing was kept."""

    status = 413
    title = "Payload too large"


@dataclass(frozen=True)
class StoredObject:
    """What :meth:`Storage.stat` knows of one key: its size in bytes and content type."""

    key: str
    size_bytes: int
    content_type: str


@dataclass(frozen=True)
class Written:
    """The result of :meth:`Storage.put_stream`: bytes written, their SHA-256 and MD5
    (hex; MD5 only as Replicate's file checksum, never for security)."""

    size_bytes: int
    sha256: str
    md5: str = ""


class Digest:
    """Counts and hashes chunks as they pass; refuses more than ``max_bytes``."""

    def __init__(self, max_bytes: int | None) -> None:
        self._hash = hashlib.sha256()
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._max = max_bytes
        self.size_bytes = 0

    def update(self, chunk: bytes) -> None:
        """Account for ``chunk``; :class:`StorageTooLarge` past ``max_bytes``."""
        self.size_bytes += len(chunk)
        if self._max is not None and self.size_bytes > self._max:
            raise StorageTooLarge(f"the object is larger than the limit of {self._max} bytes")
        self._hash.update(chunk)
        self._md5.update(chunk)

    def result(self) -> Written:
        return Written(
            size_bytes=self.size_bytes, sha256=self._hash.hexdigest(), md5=self._md5.hexdigest()
        )


def check_key(key: str) -> list[str]:
    """The parts of a valid key; ValueError for an empty, absolute or ``..`` key."""
    parts = key.split("/")
    if (
        not key
        or key.startswith("/")
        or parts[0] == INCOMING
        or any(p in {"", ".", ".."} for p in parts)
    ):
        raise ValueError(f"invalid storage key {key!r}")
    return parts


class Storage(Protocol):
    """Where owned files (outputs, uploads) live.

    ``fsync``: whether :meth:`put_file` fsyncs the file it stores (a local directory with
    ``[storage] fsync = true``), so a spool for it should start its write-back early
    (gateway/files/download.py).
    """

    fsync: bool

    async def put(self, key: str, data: bytes, content_type: str = "") -> None:
        """Store ``data`` under ``key`` (overwriting identical content is harmless)."""
        ...

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = "",
        max_bytes: int | None = None,
    ) -> Written:
        """Store a stream under ``key`` holding at most one part in memory.

        Raises
        ------
        StorageTooLarge
            More than ``max_bytes`` arrived; the partial object is discarded.
        """
        ...

    def temp_path(self) -> Path:
        """A new, unguessable local path to spool an incoming file to (then
        :meth:`put_file`); on the storage's own file system where it has one."""
        ...

    async def put_file(self, key: str, path: Path) -> None:
        """Store the file at ``path`` (from :meth:`temp_path`) under ``key``; the file is
        moved or copied, and the caller removes whatever is left at ``path``."""
        ...

    async def stat(self, key: str) -> StoredObject | None:
        """Size and content type of ``key``, or None when it is not stored."""
        ...

    def read(self, key: str) -> AsyncIterator[bytes]:
        """The bytes of ``key`` in chunks; :class:`FileNotFoundError` when absent."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``; removing an absent key is not an error."""
        ...

    async def presign(self, key: str, expires_s: float) -> str | None:
        """A URL that serves ``key`` without the gateway for ``expires_s`` seconds, or
        None when the backend cannot make one (the gateway then serves the bytes)."""
        ...

    async def aclose(self) -> None:
        """Release connections (the storage object is unusable afterwards)."""
        ...
