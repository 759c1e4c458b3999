"""Owned storage for output files and uploads: a local directory or an S3 bucket.

:func:`open_storage` picks the backend from ``storage_url``; both implement
:class:`~gateway.storage.base.Storage` (docs/storage.md).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from contracts.errors import ConfigurationError
from gateway.storage.base import (
    INCOMING,
    PART_SIZE_BYTES,
    Storage,
    StorageTooLarge,
    StoredObject,
    Written,
)
from gateway.storage.local import LocalStorage

__all__ = [
    "INCOMING",
    "LocalStorage",
    "S3Storage",
    "Storage",
    "StorageTooLarge",
    "StoredObject",
    "Written",
    "open_storage",
]


def __getattr__(name: str) -> object:
    if name == "S3Storage":  # imported on first use: botocore is slow to load
        from gateway.storage.s3 import S3Storage

        return S3Storage
    raise AttributeError(name)


def open_storage(
    storage_url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    part_size_bytes: int = PART_SIZE_BYTES,
    fsync: bool = True,
) -> Storage:
    """The storage named by ``storage_url`` (no I/O until first use).

    ``file:///abs/dir`` or ``file://./rel/dir`` is a local directory, fsyncing each file
    before it is recorded unless ``fsync`` is False (docs/storage.md, "Durability");
    ``s3://bucket/prefix`` is a bucket, reached with the other arguments (None:
    botocore's AWS defaults).

    Raises
    ------
    ConfigurationError
        For another scheme, or an ``s3://`` URL without a bucket.
    """
    parts = urlsplit(storage_url)
    if parts.scheme == "file":
        raw = parts.netloc + parts.path if parts.netloc else parts.path
        return LocalStorage(Path(raw).expanduser().resolve(), fsync=fsync)
    if parts.scheme == "s3":
        from gateway.storage.s3 import S3Storage  # botocore loads only when S3 is used

        if not parts.netloc:
            raise ConfigurationError(f"storage_url {storage_url!r} names no bucket")
        return S3Storage(
            bucket=parts.netloc,
            prefix=parts.path,
            endpoint_url=endpoint_url,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            part_size_bytes=part_size_bytes,
        )
    raise ConfigurationError(
        f"storage_url {storage_url!r} is not supported; use file:///path/to/dir or "
        "s3://bucket/prefix"
    )
