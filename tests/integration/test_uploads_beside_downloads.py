"""A Cog upload, and the clean-up of a cancelled one, go on while :data:`MAX_DOWNLOADS`
long output downloads run (gateway/files/download.py; docs/storage.md, "Threads"): an upload's
block writes and ``Spool.discard`` used to wait for a thread of the downloads' pool,
held by bodies that take minutes (a 1 GiB file each), so Cog's upload stalled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.files import download as downloads
from gateway.files.download import MAX_DOWNLOADS, SPOOL_BLOCK_BYTES, Spool
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

UPLOAD_TOKEN = "upload-token-for-tests-0123456789"  # a test value, not a credential
DEADLINE_S = 10.0
CHUNK_BYTES = 64 << 10  # as a client streams a file


class EndlessBodies:
    """A 127.0.0.1 server whose every GET is a 200 with a body that never ends: a few
    bytes now and then, until :meth:`stop`."""

    def __init__(self) -> None:
        self.serving = 0  # requests whose body has begun
        self._stop = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> EndlessBodies:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/out.bin"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                         b"Connection: close\r\n\r\n")
            self.serving += 1
            while not self._stop.is_set():
                writer.write(bytes(4096))
                await writer.drain()
                try:
                    await asyncio.wait_for(self._stop.wait(), 0.1)
                except TimeoutError:
                    pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def busy_downloads(tmp_path: Path) -> AsyncIterator[None]:
    """:data:`MAX_DOWNLOADS` downloads in progress, each on its thread."""
    async with EndlessBodies() as server:
        tasks = [
            asyncio.create_task(downloads.download(
                server.url, tmp_path / f"download-{n}", max_bytes=1 << 40, timeout_s=600,
                accept=lambda raw: raw,
            ))
            for n in range(MAX_DOWNLOADS)
        ]
        await wait_until(lambda: server.serving == MAX_DOWNLOADS, DEADLINE_S,
                         what=f"{MAX_DOWNLOADS} downloads receiving their bodies")
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_cog_upload_finishes_while_the_downloads_run(
    make_gateway: Any, busy_downloads: None,
) -> None:
    gateway: GatewayHarness = await make_gateway(
        providers={"fake": {"kind": "fake", "upload_token": UPLOAD_TOKEN}})
    job_id = (await gateway.create({"version": VERSION, "input": {"n": 1}}))["id"]
    await gateway.settle()

    async def body() -> AsyncIterator[bytes]:  # block writes, then the close, on threads
        for _ in range(3 * SPOOL_BLOCK_BYTES // CHUNK_BYTES + 1):
            yield bytes(CHUNK_BYTES)

    response = await asyncio.wait_for(gateway.client.put(
        f"/provider-uploads/fake/{UPLOAD_TOKEN}/out.bin", data=body(),
        headers={"X-Prediction-Id": job_id, "Content-Type": "application/octet-stream"},
    ), DEADLINE_S)
    assert response.status == 201, await response.text()


async def test_a_cancelled_upload_is_cleaned_up_while_the_downloads_run(
    tmp_path: Path, busy_downloads: None,
) -> None:
    path = tmp_path / "upload"
    spool = Spool(path, 1 << 30)
    await spool.write(bytes(SPOOL_BLOCK_BYTES))  # a block handed to a thread
    await asyncio.wait_for(spool.discard(), DEADLINE_S)
    assert not path.exists()
