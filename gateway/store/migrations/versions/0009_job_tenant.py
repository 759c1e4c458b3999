"""jobs.tenant: the tenant whose API token created the prediction (docs/security.md).

Rows stored before tenants belong to ``default`` (the server default fills them); the
index serves a tenant's list, newest first, as ``ix_jobs_created_at_id`` serves all.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("tenant", sa.String(32), nullable=False, server_default="default")
        )
    op.create_index("ix_jobs_tenant_created_at_id", "jobs", ["tenant", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_tenant_created_at_id", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tenant")
