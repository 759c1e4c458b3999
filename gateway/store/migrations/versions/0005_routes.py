"""Routes as data: the routes and route_changes tables, jobs.arm and jobs.shadow_of.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "routes",
        sa.Column("key", sa.String(320), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("changed_live", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_routes"),
    )
    op.create_table(
        "route_changes",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("route", sa.String(320), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("who", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("before", sa.JSON),
        sa.Column("after", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("evidence", sa.JSON),
        sa.PrimaryKeyConstraint("id", name="pk_route_changes"),
    )
    op.create_index("ix_route_changes_route_id", "route_changes", ["route", "id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("arm", sa.String(16), nullable=False, server_default="control")
        )
        batch.add_column(sa.Column("shadow_of", sa.String(26)))
    op.create_index("ix_jobs_route_completed_at", "jobs", ["route", "completed_at"])
    op.create_index("ix_jobs_shadow_of", "jobs", ["shadow_of"])


def downgrade() -> None:
    op.drop_index("ix_jobs_shadow_of", "jobs")
    op.drop_index("ix_jobs_route_completed_at", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("shadow_of")
        batch.drop_column("arm")
    op.drop_index("ix_route_changes_route_id", "route_changes")
    op.drop_table("route_changes")
    op.drop_table("routes")
