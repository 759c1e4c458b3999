"""A storage whose fsync fails (EIO: the disk or file system is broken) fails the
prediction with a clear error, records no output and leaves no half-stored file, on
every backend: a prediction is reported ``succeeded`` only with its files durable
(docs/storage.md, "Durability"). Attacked on 2026-11-30 after 5d5c504; it held."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.http import keys
from gateway.storage import local
from gateway.store.schema import assets
from tests.integration.test_outputs import data_uri, finish_with


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("failing", ["file", "directory"])
async def test_a_failed_fsync_fails_the_prediction_and_stores_nothing(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    gateway = await make_gateway()
    root = gateway.app[keys.STORAGE].root
    fsync = os.fsync

    def broken(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}") == (failing == "directory"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(local.os, "fsync", broken)
    done = await finish_with(gateway, data_uri("text/plain", b"lost to the disk"))
    assert done["status"] == "failed", done
    assert done["output"] is None and "could not be stored" in done["error"]
    async with gateway.store.engine.connect() as conn:
        assert (await conn.execute(sa.select(assets))).all() == []
    if failing == "file":  # before the rename: nothing took the key's place
        assert [name for name in _files(root) if not name.startswith(".")] == []
    # A directory's fsync fails after the rename: the file stays, unrecorded, as after a
    # crash between the rename and the record (retention does not see it either way).
