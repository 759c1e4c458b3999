"""A fresh SQLite store made from ``gateway/store/engine/sqlite_head.sql`` (start-up's path) is the
store the alembic migrations make: same tables, columns, constraints and indexes, same
``alembic_version``; and a later start (or ``cutover migrate``) finds it at head."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gateway.store.engine import db


def _schema(path: Path) -> tuple[set[tuple[str, str, str, str]], list[tuple[str]]]:
    with sqlite3.connect(path) as conn:
        objects = set(conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        ))
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    return objects, version


async def _migrate(path: Path, *, fresh_script: bool) -> None:
    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await db.migrate(engine, fresh_script=fresh_script)
        await db.migrate(engine)  # at head now: nothing to do, nothing fails
    finally:
        await engine.dispose()


def test_the_script_is_rendered_at_the_migrations_head() -> None:
    revision, statements = db.head_script()
    assert revision == db.head_revision(), (
        "a migration was added or changed: render the script again with "
        "`.venv/bin/python -m gateway.store.engine.db > gateway/store/engine/sqlite_head.sql`"
    )
    assert statements


async def test_a_fresh_store_from_the_script_equals_the_migrated_one(tmp_path: Path) -> None:
    scripted, migrated = tmp_path / "scripted.db", tmp_path / "migrated.db"
    await _migrate(scripted, fresh_script=True)
    await _migrate(migrated, fresh_script=False)
    objects, version = _schema(scripted)
    assert (objects, version) == _schema(migrated)
    assert version == [(db.head_revision(),)]
    assert {name for kind, name, _, _ in objects if kind == "table"} >= {"jobs", "outbox"}


async def test_a_store_with_tables_is_left_to_the_migrations(tmp_path: Path) -> None:
    path = tmp_path / "cutover.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (id INTEGER)")
    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.begin() as connection:
            assert not await db.create_at_head(connection, db.head_revision())
            assert not await db.create_at_head(connection, "not-the-head")
    finally:
        await engine.dispose()


async def test_render_writes_back_what_the_script_holds(tmp_path: Path) -> None:
    path = tmp_path / "migrated.db"
    await _migrate(path, fresh_script=False)
    assert db.render_head_script(path) == db.HEAD_SCRIPT.read_text()
