"""A fresh SQLite store created at the migrations' head from one pre-rendered script.

Running the alembic migrations on an empty SQLite file costs a cold start about a fifth
of a second (importing alembic and PostgreSQL's dialect, six revisions in batch mode);
``sqlite_head.sql`` beside this module holds what they leave behind: the ``CREATE``
statement of every table and index, read back from ``sqlite_master`` of a database the
migrations built, and the ``alembic_version`` row. :func:`create_at_head` runs it on a
database that has no table yet; every other store (an older revision, PostgreSQL) is
migrated by alembic (:func:`gateway.store.engine.db.migrate`).

The script names the revision it was rendered at; a script behind the migrations' head
is never used (alembic runs instead), and ``tests/unit/test_fresh_sqlite_schema.py``
fails until it is rendered again::

    .venv/bin/python -m gateway.store.engine.freshdb > gateway/store/engine/sqlite_head.sql
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path

from gateway.store.engine.aio import Connection

__all__ = ["SCRIPT", "create_at_head", "render", "script"]

SCRIPT = Path(__file__).with_name("sqlite_head.sql")
_REVISION_PREFIX = "-- alembic revision: "


def script(path: Path = SCRIPT) -> tuple[str | None, list[str]]:
    """(the revision the script was rendered at, its statements in order); (None, [])
    when there is no script (an install without it migrates with alembic)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, []
    revision = None
    for line in text.splitlines():
        if line.startswith(_REVISION_PREFIX):
            revision = line.removeprefix(_REVISION_PREFIX).strip()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return revision, [s.strip() for s in body.split(";\n") if s.strip()]


async def create_at_head(connection: Connection, head: str | None) -> bool:
    """Create the schema at ``head`` on ``connection`` (SQLite, inside its transaction)
    when the database has no table yet and the script is at ``head``; False (nothing
    done) otherwise, and the caller runs the migrations."""
    revision, statements = script()
    if head is None or revision != head:
        return False
    found = await connection.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    )
    if found.scalar_one() != 0:
        return False
    for statement in statements:
        await connection.exec_driver_sql(statement)
    return True


def render(path: Path) -> str:
    """The script for the SQLite database at ``path`` (migrated to its head)."""
    with sqlite3.connect(path) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    lines = [
        "-- The SQLite schema the alembic migrations build, rendered by",
        "-- `python -m gateway.store.engine.freshdb`. Do not edit.",
        f"{_REVISION_PREFIX}{revision}",
    ]
    lines += [f"{sql};\n" for (sql,) in rows]
    row = f"INSERT INTO alembic_version (version_num) VALUES ('{revision}');"  # noqa: S608
    lines.append(row)  # (the revision id of the migration files, not an input)
    return "\n".join(lines) + "\n"


async def _migrated(path: Path) -> None:
    from gateway.store.engine import db

    engine = db.create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await db.migrate(engine, fresh_script=False)
    finally:
        await engine.dispose()


def main() -> None:
    """Print the script for the migrations' current head."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "head.db"
        asyncio.run(_migrated(path))
        sys.stdout.write(render(path))


if __name__ == "__main__":
    main()
