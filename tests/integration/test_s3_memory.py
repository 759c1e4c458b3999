"""A large output streams into S3 with bounded memory (docs/storage.md).

``make test`` streams ``CUTOVER_S3_BIG_BYTES`` (default 96 MiB); the full 1 GiB run is::

    CUTOVER_S3_BIG_BYTES=1073741824 .venv/bin/python -m pytest tests/integration/test_s3_memory.py

The peak resident memory of this process, sampled while the upload runs, may grow by at
most a few parts over its level before, whatever the object's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest

from gateway.storage.s3 import MIN_PART_BYTES
from tests.integration.test_storage_contract import s3_storage

SIZE_BYTES = int(os.environ.get("CUTOVER_S3_BIG_BYTES", str(96 * 1024 * 1024)))
CHUNK = os.urandom(1 << 16)
MAX_GROWTH_BYTES = 8 * MIN_PART_BYTES  # a few parts in flight, never the object


async def generated(total: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = CHUNK[: min(len(CHUNK), total - sent)]
        sent += len(piece)
        yield piece


async def sample_peak(peak: list[int], stop: asyncio.Event) -> None:
    me = psutil.Process()
    while not stop.is_set():
        peak[0] = max(peak[0], me.memory_info().rss)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.02)


@pytest.mark.timeout(900)
async def test_a_large_output_streams_into_s3_with_bounded_memory(s3_server: Any) -> None:
    bucket = f"big-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    storage = s3_storage(s3_server, bucket, part_size_bytes=MIN_PART_BYTES)
    expected = hashlib.sha256()
    async for piece in generated(SIZE_BYTES):
        expected.update(piece)
    try:
        await storage.put("warm/up", b"x")  # client and connection pool exist before the baseline
        before = psutil.Process().memory_info().rss
        peak, stop = [before], asyncio.Event()
        sampler = asyncio.create_task(sample_peak(peak, stop))
        written = await storage.put_stream("big/output.bin", generated(SIZE_BYTES))
        stop.set()
        await sampler
        assert written.size_bytes == SIZE_BYTES
        assert written.sha256 == expected.hexdigest()
        found = await storage.stat("big/output.bin")
        assert found is not None and found.size_bytes == SIZE_BYTES
        assert peak[0] - before < MAX_GROWTH_BYTES, f"RSS grew by {peak[0] - before} bytes"
    finally:
        await storage.aclose()
