"""The alembic migrations build exactly the tables of ``gateway/store/schema.py`` (both
backends): alembic's own comparison of a migrated database with the metadata finds
nothing to change (the promise of schema.py's docstring)."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from gateway.store import schema
from gateway.store.engine import db

pytestmark = pytest.mark.every_backend  # the store's SQL is the point


def _differences(connection: Any) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, schema.metadata))


async def test_the_migrated_schema_is_the_metadata(database_url: str) -> None:
    engine = db.create_engine(database_url)
    try:
        await db.migrate(engine, fresh_script=False)  # the migrations, not sqlite_head.sql
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
    finally:
        await engine.dispose()
