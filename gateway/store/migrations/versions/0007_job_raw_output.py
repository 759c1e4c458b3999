"""jobs.raw_output: the provider's output of a prediction that failed its model's
``Output`` schema, kept for operators (docs/translation.md, "Output conformance").

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("raw_output", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("raw_output")
