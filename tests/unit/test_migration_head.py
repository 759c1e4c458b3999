"""``db.head_revision`` (read from the migration files, so start-up need not import
alembic) names the same head as alembic itself."""

from __future__ import annotations

from alembic.config import Config
from alembic.script import ScriptDirectory

from gateway.store.engine import db


def test_head_revision_is_alembics_head() -> None:
    config = Config()
    config.set_main_option("script_location", str(db._MIGRATIONS))
    assert db.head_revision() == ScriptDirectory.from_config(config).get_current_head()
