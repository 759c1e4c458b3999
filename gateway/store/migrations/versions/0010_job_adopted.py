"""jobs.adopted and jobs.upstream: predictions adopted from the legacy provider
(docs/cutover-day.md), with the upstream's own object as it was first read.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ALTER TABLE ADD COLUMN, not a batch: SQLite's rebuilt table listed its indexes in an
    # order that changed from run to run (sqlite_head.sql would not render alike twice).
    op.add_column("jobs", sa.Column("adopted", sa.Boolean, nullable=False,
                                    server_default=sa.false()))
    op.add_column("jobs", sa.Column("upstream", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("upstream")
        batch.drop_column("adopted")
