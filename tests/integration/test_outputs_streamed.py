"""Downloaded outputs are streamed: spooled to a temporary file and hashed while they
arrive, then moved into storage (gateway/files/outputs.py); nothing is left behind on failure."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.job import JobState
from gateway.http import keys
from gateway.storage import INCOMING
from gateway.store.schema import assets
from tests.support.gateway import VERSION, GatewayHarness

BLOCK = bytes(range(256)) * 4096  # 1 MiB
FILE_HOSTS = {"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}}


class Files:
    """Serves ``/big.bin`` (``mib`` MiB, streamed in 1 MiB writes) and counts bytes sent."""

    def __init__(self, mib: int) -> None:
        self.mib = mib
        self.sent = 0
        app = web.Application()
        app.router.add_get("/big.bin", self._big)
        self.server = TestServer(app, host="127.0.0.1")

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    def digest(self) -> str:
        return hashlib.sha256(BLOCK * self.mib).hexdigest()

    async def _big(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "video/mp4"})
        await response.prepare(request)
        for _ in range(self.mib):
            await response.write(BLOCK)
            self.sent += len(BLOCK)
        await response.write_eof()
        return response


@pytest.fixture
async def files() -> AsyncIterator[Files]:
    server = Files(mib=12)
    await server.server.start_server()
    yield server
    await server.server.close()


async def finish_with(gateway: GatewayHarness, output: object) -> dict:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output=output) == 200
    await gateway.settle()
    return await gateway.get(prediction["id"])


def incoming(gateway: GatewayHarness) -> list[Path]:
    root = gateway.app[keys.STORAGE].root / INCOMING  # type: ignore[attr-defined]
    return list(root.iterdir()) if root.exists() else []


async def test_a_large_download_is_stored_whole_with_its_sha256(make_gateway, files: Files):
    gateway = await make_gateway(providers=FILE_HOSTS)
    done = await finish_with(gateway, {"video": files.url("/big.bin")})
    assert done["status"] == "succeeded", done["error"]
    async with gateway.store.engine.connect() as conn:
        row = (await conn.execute(sa.select(assets))).one()
    assert (row.size_bytes, row.sha256, row.content_type) == (
        12 * len(BLOCK), files.digest(), "video/mp4"
    )
    stored = gateway.app[keys.STORAGE].path(row.key)
    assert stored is not None and hashlib.sha256(stored.read_bytes()).hexdigest() == row.sha256
    assert incoming(gateway) == []
    assert gateway.app[keys.STORAGE].path(f"{INCOMING}/anything") is None


async def test_a_download_over_the_limit_fails_and_leaves_nothing(make_gateway, files: Files):
    gateway = await make_gateway(gateway={"max_output_bytes": 3 * len(BLOCK)}, providers=FILE_HOSTS)
    done = await finish_with(gateway, files.url("/big.bin"))
    assert done["status"] == "failed" and "exceeds the limit" in done["error"]
    assert incoming(gateway) == []


async def test_a_refused_type_fails_before_the_body_is_read(make_gateway, files: Files):
    gateway = await make_gateway(
        gateway={"allowed_output_types": ["image/*"]}, providers=FILE_HOSTS
    )
    done = await finish_with(gateway, files.url("/big.bin"))
    assert done["status"] == "failed" and "video/mp4" in done["error"]
    assert files.sent < files.mib * len(BLOCK)
    assert incoming(gateway) == []
