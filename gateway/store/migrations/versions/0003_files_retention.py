"""files (the Files API), the indexes retention pruning reads, and jobs.owner and
jobs.priority (fair dispatch across API tokens, route priority).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("storage_key", sa.String(512), nullable=False),
        sa.Column("file_metadata", sa.JSON, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_files"),
    )
    op.create_index("ix_files_owner_created_at_id", "files", ["owner", "created_at", "id"])
    op.create_index("ix_files_expires_at", "files", ["expires_at"])
    op.create_index("ix_outbox_delivered_at", "outbox", ["delivered_at"])
    op.create_index(
        "ix_jobs_data_removed_completed_at", "jobs", ["data_removed", "completed_at"]
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(64)))
        batch.add_column(sa.Column("priority", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("priority")
        batch.drop_column("owner")
    op.drop_index("ix_jobs_data_removed_completed_at", table_name="jobs")
    op.drop_index("ix_outbox_delivered_at", table_name="outbox")
    op.drop_index("ix_files_expires_at", table_name="files")
    op.drop_index("ix_files_owner_created_at_id", table_name="files")
    op.drop_table("files")
