"""console_sessions: console sign-ins shared by every gateway process (docs/console.md).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("seen_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_console_sessions"),
    )


def downgrade() -> None:
    op.drop_table("console_sessions")
