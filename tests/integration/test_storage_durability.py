"""``[storage] fsync`` (docs/storage.md, "Durability"): with it on (the default) a local
directory fsyncs each stored file's data before renaming it into place and its
directories after, before the store call returns (so before the output is recorded),
and a spooled download or upload starts each block's write-back as it goes; with it off
nothing is fsynced or advised. Observed by wrapping ``os.fsync``, ``os.replace`` and
``os.posix_fadvise`` (the calls the kernel sees), recording what each acted on, in order."""

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
from gateway.files.download import BLOCK_BYTES, Spool
from gateway.http import keys
from gateway.storage import INCOMING, LocalStorage
from gateway.store.schema import assets
from tests.support.gateway import VERSION, GatewayHarness

DATA = bytes(range(256)) * 1024  # 256 KiB
BIG = bytes(range(256)) * (4096 * 9 + 3)  # 9 MiB and 768 bytes: three blocks, the last short


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


@dataclass(frozen=True)
class Advised:
    """One ``os.posix_fadvise``: the file, the range and the advice."""

    path: Path
    offset: int
    length: int
    advice: int


class Calls(list[Synced | Replaced | Advised]):
    def synced_paths(self) -> list[Path]:
        return [call.path for call in self if isinstance(call, Synced)]

    def advised(self) -> list[Advised]:
        return [call for call in self if isinstance(call, Advised)]


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

    def spy_fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        seen.append(Advised(Path(os.readlink(f"/proc/self/fd/{fd}")), offset, length, advice))
        fadvise(fd, offset, length, advice)

    fadvise = os.posix_fadvise
    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    monkeypatch.setattr(os, "posix_fadvise", spy_fadvise)
    return seen


def assert_written_back_as_it_went(calls: Calls, size: int, directory: Path) -> None:
    """One spool file in ``directory`` (its descriptor open: the path is read from it),
    each of its blocks handed to write-back in order, as it was hashed."""
    advised = calls.advised()
    assert {a.path.parent for a in advised} == {directory} and len(
        {a.path for a in advised}
    ) == 1, advised
    assert [(a.offset, a.length, a.advice) for a in advised] == [
        (start, min(BLOCK_BYTES, size - start), os.POSIX_FADV_DONTNEED)
        for start in range(0, size, BLOCK_BYTES)
    ]


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
    await _store(storage, key, way)
    target = storage.root / key
    assert target.read_bytes() == DATA
    assert_durable(calls, storage.root, target)
    if way != "put_file":  # the content type kept beside it is synced too
        assert target.with_name("out.bin.type") in calls.synced_paths()


@pytest.mark.parametrize("way", ["put", "put_stream", "put_file"])
async def test_with_fsync_off_nothing_is_synced(tmp_path: Path, calls: Calls, way: str) -> None:
    storage = LocalStorage(tmp_path / "store", fsync=False)
    key = "p-1/0123456789abcdef/out.bin"
    await _store(storage, key, way)
    assert (storage.root / key).read_bytes() == DATA
    assert calls.synced_paths() == []


@pytest.mark.parametrize("write_back", [True, False])
async def test_an_upload_spool_starts_write_back_block_by_block_only_when_asked(
    tmp_path: Path, calls: Calls, write_back: bool
) -> None:
    spool = Spool(tmp_path / "spool", len(BIG), block_bytes=BLOCK_BYTES, write_back=write_back)
    async for chunk in chunks(BIG):
        await spool.write(chunk)
    assert await spool.finish() == hashlib.sha256(BIG).hexdigest()
    if write_back:
        assert_written_back_as_it_went(calls, len(BIG), tmp_path)
    else:
        assert calls.advised() == []


@pytest.fixture
async def file_server() -> AsyncIterator[str]:
    async def get(request: web.Request) -> web.Response:
        return web.Response(body=BIG, content_type="video/mp4")

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
    root = gateway.app[keys.STORAGE].root
    assert_durable(calls, root, stored)
    assert_written_back_as_it_went(calls, len(BIG), root / INCOMING)
    first_sync = next(i for i, call in enumerate(calls) if isinstance(call, Synced))
    assert calls.index(calls.advised()[-1]) < first_sync  # while the download ran


async def test_storage_fsync_false_in_the_configuration_syncs_nothing(
    make_gateway, file_server: str, calls: Calls
) -> None:
    gateway = await make_gateway(providers=FILE_HOSTS, storage={"fsync": False})
    await copied(gateway, file_server)
    assert calls.synced_paths() == [] and calls.advised() == []


async def _store(storage: LocalStorage, key: str, way: str) -> None:
    """Store :data:`DATA` under ``key`` by ``way``: put, put_stream or put_file."""
    if way == "put":
        await storage.put(key, DATA, "application/x-test")
    elif way == "put_stream":
        await storage.put_stream(key, chunks(DATA), content_type="application/x-test")
    else:
        spooled = storage.temp_path()
        spooled.write_bytes(DATA)
        await storage.put_file(key, spooled)
