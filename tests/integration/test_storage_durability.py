"""``[storage] fsync`` (docs/storage.md, "Durability"): with it on (the default) a local
directory fsyncs each stored file's data before renaming it into place and its
directories after, before the store call returns (so before the output is recorded);
with it off nothing is fsynced. Observed by wrapping ``os.fsync`` and ``os.replace``
(the calls the kernel sees), recording the inode and path each acted on, in order."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.job import JobState
from gateway.http import keys
from gateway.storage import LocalStorage
from gateway.store.schema import assets
from tests.support.gateway import VERSION, GatewayHarness

DATA = bytes(range(256)) * 1024  # 256 KiB


@dataclass(frozen=True)
class Synced:
    """One ``os.fsync``: the path its descriptor named and the inode, at that moment."""

    path: Path
    inode: int


@dataclass(frozen=True)
class Replaced:
    """One ``os.replace`` of a file onto ``target``, the inode moved."""

    target: Path
    inode: int


class Calls(list[Synced | Replaced]):
    def synced_paths(self) -> list[Path]:
        return [call.path for call in self if isinstance(call, Synced)]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    seen = Calls()
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        seen.append(Synced(Path(os.readlink(f"/proc/self/fd/{fd}")), os.fstat(fd).st_ino))
        fsync(fd)

    def spy_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append(Replaced(Path(dst), os.stat(src).st_ino))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    return seen


def assert_durable(calls: Calls, root: Path, target: Path) -> None:
    """``target``'s data fsynced before the rename that put it in place, then the
    directories from its own up to ``root``."""
    inode = target.stat().st_ino
    rename = calls.index(Replaced(target, inode))
    assert any(isinstance(c, Synced) and c.inode == inode for c in calls[:rename]), calls
    after = [c.path for c in calls[rename + 1 :] if isinstance(c, Synced)]
    inside = target.parent.relative_to(root)
    directories = [root / d for d in [inside, *inside.parents]]  # its own, ..., the root
    assert directories[-1] == root and all(d in after for d in directories), (after, directories)


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 1 << 16):
        yield data[start : start + (1 << 16)]


@pytest.mark.parametrize("way", ["put", "put_stream", "put_file"])
async def test_with_fsync_on_a_file_is_synced_before_its_rename_and_its_directories_after(
    tmp_path: Path, calls: Calls, way: str
) -> None:
    storage = LocalStorage(tmp_path / "store")  # fsync on by default
    key = "p-1/0123456789abcdef/out.bin"
    if way == "put":
        await storage.put(key, DATA, "application/x-test")
    elif way == "put_stream":
        await storage.put_stream(key, chunks(DATA), content_type="application/x-test")
    else:
        spooled = storage.temp_path()
        spooled.write_bytes(DATA)
        await storage.put_file(key, spooled)
    target = storage.root / key
    assert target.read_bytes() == DATA
    assert_durable(calls, storage.root, target)
    if way != "put_file":  # the content type kept beside it is synced too
        assert target.with_name("out.bin.type") in calls.synced_paths()


@pytest.mark.parametrize("way", ["put", "put_stream", "put_file"])
async def test_with_fsync_off_nothing_is_synced(tmp_path: Path, calls: Calls, way: str) -> None:
    storage = LocalStorage(tmp_path / "store", fsync=False)
    key = "p-1/0123456789abcdef/out.bin"
    if way == "put":
        await storage.put(key, DATA, "application/x-test")
    elif way == "put_stream":
        await storage.put_stream(key, chunks(DATA), content_type="application/x-test")
    else:
        spooled = storage.temp_path()
        spooled.write_bytes(DATA)
        await storage.put_file(key, spooled)
    assert (storage.root / key).read_bytes() == DATA
    assert calls.synced_paths() == []


@pytest.fixture
async def file_server() -> AsyncIterator[str]:
    async def get(request: web.Request) -> web.Response:
        return web.Response(body=DATA, content_type="video/mp4")

    app = web.Application()
    app.router.add_get("/out.mp4", get)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/out.mp4"))
    await server.close()


async def copied(gateway: GatewayHarness, url: str) -> Path:
    """Complete a prediction whose output is ``url``; the stored file's path."""
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output=url) == 200
    await gateway.settle()
    done = await gateway.get(prediction["id"])
    assert done["status"] == "succeeded", done["error"]
    async with gateway.store.engine.connect() as conn:
        row = (await conn.execute(sa.select(assets))).one()
    stored = gateway.app[keys.STORAGE].path(row.key)
    assert stored is not None and hashlib.sha256(stored.read_bytes()).hexdigest() == row.sha256
    return stored


FILE_HOSTS = {"fake": {"kind": "fake", "file_hosts": ["127.0.0.1"]}}


async def test_a_downloaded_output_is_synced_by_default(
    make_gateway, file_server: str, calls: Calls
) -> None:
    gateway = await make_gateway(providers=FILE_HOSTS)
    stored = await copied(gateway, file_server)
    assert_durable(calls, gateway.app[keys.STORAGE].root, stored)


async def test_storage_fsync_false_in_the_configuration_syncs_nothing(
    make_gateway, file_server: str, calls: Calls
) -> None:
    gateway = await make_gateway(providers=FILE_HOSTS, storage={"fsync": False})
    await copied(gateway, file_server)
    assert calls.synced_paths() == []
