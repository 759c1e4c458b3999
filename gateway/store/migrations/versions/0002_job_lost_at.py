"""jobs.lost_at: when a provider first reported a job it no longer knows.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("lost_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lost_at")
