"""shadow_comparisons: each compared shadow pair, stored once (docs/shadow.md).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shadow_comparisons",
        sa.Column("shadow_id", sa.String(26), nullable=False),
        sa.Column("primary_id", sa.String(26), nullable=False),
        sa.Column("route", sa.String(320), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("compared_at", UTCDateTime, nullable=False),
        sa.Column("comparison", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("shadow_id", name="pk_shadow_comparisons"),
    )
    op.create_index("ix_shadow_comparisons_route_kind_created_at", "shadow_comparisons",
                    ["route", "kind", "created_at"])
    op.create_index("ix_shadow_comparisons_primary_id", "shadow_comparisons", ["primary_id"])


def downgrade() -> None:
    op.drop_index("ix_shadow_comparisons_primary_id", "shadow_comparisons")
    op.drop_index("ix_shadow_comparisons_route_kind_created_at", "shadow_comparisons")
    op.drop_table("shadow_comparisons")
