"""Rows of the Files API (``files``): one uploaded file each, owned by an API token.

``owner`` is the digest of the token that uploaded it (never the token); every read is
scoped to it. See gateway/files/service.py for the service and docs/files.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gateway.store.engine.aio import Engine
from gateway.store.schema import files

__all__ = ["FileRecord", "FileStore"]


@dataclass(frozen=True)
class FileRecord:
    """One stored upload."""

    id: str
    owner: str
    name: str
    content_type: str
    size_bytes: int
    sha256: str
    md5: str
    storage_key: str
    metadata: Any
    created_at: datetime
    expires_at: datetime


def _record(row: Any) -> FileRecord:
    values = dict(row._mapping)
    values["metadata"] = values.pop("file_metadata")
    return FileRecord(**values)


class FileStore:
    """Insert, read, list, delete and expire file rows."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def insert(self, record: FileRecord) -> None:
        values = {k: v for k, v in vars(record).items() if k != "metadata"}
        async with self._engine.begin() as conn:
            await conn.execute(files.insert().values(file_metadata=record.metadata, **values))

    async def get(self, file_id: str, owner: str) -> FileRecord | None:
        query = sa.select(files).where(files.c.id == file_id, files.c.owner == owner)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _record(row) if row is not None else None

    async def get_any(self, file_id: str) -> FileRecord | None:
        """The file whatever its owner (signed download URLs carry no token)."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(files).where(files.c.id == file_id))).first()
        return _record(row) if row is not None else None

    async def page(
        self, owner: str, before: tuple[datetime, str] | None, limit: int
    ) -> list[FileRecord]:
        """Newest first, after the ``(created_at, id)`` position ``before``."""
        query = sa.select(files).where(files.c.owner == owner)
        if before is not None:
            at, file_id = before
            query = query.where(
                sa.or_(
                    files.c.created_at < at,
                    sa.and_(files.c.created_at == at, files.c.id < file_id),
                )
            )
        query = query.order_by(files.c.created_at.desc(), files.c.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def delete(self, file_id: str, owner: str | None = None) -> FileRecord | None:
        """Remove the row; the removed record, or None when there was none."""
        where = [files.c.id == file_id]
        if owner is not None:
            where.append(files.c.owner == owner)
        async with self._engine.begin() as conn:
            row = (await conn.execute(sa.select(files).where(*where))).first()
            if row is None:
                return None
            await conn.execute(files.delete().where(*where))
        return _record(row)

    async def expired(self, now: datetime, limit: int) -> list[FileRecord]:
        """Up to ``limit`` files whose ``expires_at`` has passed (index ``expires_at``)."""
        query = (
            sa.select(files).where(files.c.expires_at < now).order_by(files.c.expires_at)
        ).limit(limit)
        async with self._engine.connect() as conn:
            return [_record(row) for row in await conn.execute(query)]
