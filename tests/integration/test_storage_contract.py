"""One storage contract, every backend: a local directory and an S3 bucket (moto's
server on 127.0.0.1, started by the tests). docs/storage.md."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.storage import LocalStorage, S3Storage, Storage, StorageTooLarge
from gateway.storage.s3 import MIN_PART_BYTES
from tests.support.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY


def s3_storage(server: Any, bucket: str, **kwargs: Any) -> S3Storage:
    return S3Storage(
        bucket=bucket,
        prefix="gw/assets",
        endpoint_url=server.endpoint_url,
        region="us-east-1",
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        **kwargs,
    )


@pytest.fixture(params=["file", "s3"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    if request.param == "file":
        backend: Storage = LocalStorage(tmp_path / "store")
    else:
        server = request.getfixturevalue("s3_server")
        bucket = f"b-{uuid.uuid4().hex[:12]}"
        server.create_bucket(bucket)
        backend = s3_storage(server, bucket, part_size_bytes=MIN_PART_BYTES)
    try:
        yield backend
    finally:
        await backend.aclose()


async def chunks_of(data: bytes, size: int = 1 << 20) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read_all(storage: Storage, key: str) -> bytes:
    return b"".join([chunk async for chunk in storage.read(key)])


async def test_put_then_read_and_stat(storage: Storage) -> None:
    await storage.put("job1/abc/out.txt", b"HELLO", "text/plain")
    assert await read_all(storage, "job1/abc/out.txt") == b"HELLO"
    found = await storage.stat("job1/abc/out.txt")
    assert found is not None
    assert (found.size_bytes, found.content_type) == (5, "text/plain")


async def test_overwrite_keeps_the_last_bytes(storage: Storage) -> None:
    await storage.put("k/one", b"first", "text/plain")
    await storage.put("k/one", b"second", "application/json")
    assert await read_all(storage, "k/one") == b"second"
    found = await storage.stat("k/one")
    assert found is not None and found.content_type == "application/json"


async def test_small_stream_is_one_object(storage: Storage) -> None:
    data = os.urandom(300_000)
    written = await storage.put_stream("s/small.bin", chunks_of(data, 4096))
    assert (written.size_bytes, written.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert await read_all(storage, "s/small.bin") == data


async def test_large_stream_goes_in_parts(storage: Storage) -> None:
    data = os.urandom(2 * MIN_PART_BYTES + 12345)
    written = await storage.put_stream(
        "s/large.bin", chunks_of(data), content_type="application/octet-stream"
    )
    assert written.sha256 == hashlib.sha256(data).hexdigest()
    assert await read_all(storage, "s/large.bin") == data
    found = await storage.stat("s/large.bin")
    assert found is not None and found.size_bytes == len(data)


async def test_a_stream_over_the_limit_leaves_nothing(storage: Storage) -> None:
    with pytest.raises(StorageTooLarge):
        await storage.put_stream("s/too-big", chunks_of(b"x" * 10_000, 1000), max_bytes=5000)
    with pytest.raises(StorageTooLarge):
        await storage.put_stream(
            "s/too-big", chunks_of(b"x" * (MIN_PART_BYTES * 2)), max_bytes=MIN_PART_BYTES + 1
        )
    assert await storage.stat("s/too-big") is None


async def test_a_failing_stream_leaves_nothing(storage: Storage) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"a" * (MIN_PART_BYTES + 1)
        raise ConnectionResetError("upstream went away")

    with pytest.raises(ConnectionResetError):
        await storage.put_stream("s/broken", broken())
    assert await storage.stat("s/broken") is None


async def test_delete_is_idempotent(storage: Storage) -> None:
    await storage.put("d/x", b"1")
    await storage.delete("d/x")
    await storage.delete("d/x")
    assert await storage.stat("d/x") is None
    with pytest.raises(FileNotFoundError):
        await read_all(storage, "d/x")


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a"])
async def test_keys_cannot_escape(storage: Storage, key: str) -> None:
    with pytest.raises(ValueError, match="invalid storage key"):
        await storage.put(key, b"x")
    assert await storage.stat(key) is None
    with pytest.raises(FileNotFoundError):
        await read_all(storage, key)


async def test_presigned_urls_where_the_backend_has_them(storage: Storage) -> None:
    await storage.put("p/file.txt", b"signed", "text/plain")
    url = await storage.presign("p/file.txt", 60)
    if isinstance(storage, LocalStorage):
        assert url is None
        return
    assert url is not None and "Signature" in url
    async with httpx.AsyncClient(trust_env=False) as http:
        answer = await http.get(url)
    assert answer.status_code == 200 and answer.content == b"signed"
