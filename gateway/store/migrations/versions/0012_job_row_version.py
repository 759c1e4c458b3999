"""jobs.row_version: a number the database itself raises on every change of a job's row,
so a GET can tell with one small read whether the prediction's JSON it made before is
still the prediction's current state (docs/lifecycle.md, "Reads of a prediction").

A trigger, not the application, raises it: every ``UPDATE`` of ``jobs`` counts, whichever
process, module or tool runs it. SQLite: an ``AFTER UPDATE`` trigger sets it to the old
value plus one (its ``WHEN`` keeps it from firing on its own update); PostgreSQL: a
``BEFORE UPDATE`` trigger sets it on the new row. A later batch migration of ``jobs`` on
SQLite rebuilds the table and drops the trigger: it must create it again
(``tests/integration/test_get_current.py`` fails without it).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

SQLITE_TRIGGER = (
    "CREATE TRIGGER jobs_row_version AFTER UPDATE ON jobs FOR EACH ROW "
    "WHEN NEW.row_version = OLD.row_version BEGIN "
    "UPDATE jobs SET row_version = OLD.row_version + 1 WHERE id = NEW.id; END"
)
PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION jobs_row_version() RETURNS trigger AS $$ BEGIN "
    "NEW.row_version := OLD.row_version + 1; RETURN NEW; END $$ LANGUAGE plpgsql"
)
PG_TRIGGER = (
    "CREATE TRIGGER jobs_row_version BEFORE UPDATE ON jobs FOR EACH ROW "
    "EXECUTE FUNCTION jobs_row_version()"
)


def upgrade() -> None:
    # ALTER TABLE ADD COLUMN, not a batch (as 0010: a rebuilt table renders unstably).
    op.add_column("jobs", sa.Column("row_version", sa.BigInteger, nullable=False,
                                    server_default="0"))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS jobs_row_version" + (
        " ON jobs" if op.get_bind().dialect.name == "postgresql" else ""))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS jobs_row_version()")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("row_version")
