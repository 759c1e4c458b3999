"""jobs.target: the provider's own name for the model (a route's ``target``).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("target", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("target")
