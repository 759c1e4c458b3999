"""jobs.target: the provider's own name for the model (a route's ``target``).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("target", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("target")
