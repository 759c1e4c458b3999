"""outbox.job_id may be NULL: an operator webhook event (docs/webhooks.md, "Operator
webhook") is a route change's, no prediction's, and goes through the same outbox.

Revision ID: 0011
Revises: 0010
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_INDEXES = (  # made in this order: sqlite_head.sql renders alike on every run
    ("ix_outbox_status_next_attempt_at", ["status", "next_attempt_at"]),
    ("ix_outbox_job_id_id", ["job_id", "id"]),
    ("ix_outbox_delivered_at", ["delivered_at"]),
)


def _columns(job_id_nullable: bool) -> list[Any]:
    """The table's columns and constraints as 0010 left them (but ``job_id``), in a fixed
    order: alembic's batch mode rebuilt the SQLite table with its constraints in an order
    that changed from run to run."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("msg_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(26), nullable=job_id_nullable),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("last_status_code", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("leased_until", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        sa.UniqueConstraint("msg_id", name="uq_outbox_msg_id"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_outbox_job_id_jobs"),
    ]


def _set_nullable(nullable: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("outbox", "job_id", existing_type=sa.String(26), nullable=nullable)
        return
    # SQLite cannot alter a column: a new table, the rows copied, the old one dropped.
    op.create_table("outbox_0011", *_columns(nullable))
    names = ", ".join(c.name for c in _columns(nullable) if isinstance(c, sa.Column))
    op.execute(f"INSERT INTO outbox_0011 ({names}) SELECT {names} FROM outbox")  # noqa: S608
    op.drop_table("outbox")
    op.rename_table("outbox_0011", "outbox")
    for name, columns in _INDEXES:
        op.create_index(name, "outbox", columns)


def upgrade() -> None:
    _set_nullable(True)


def downgrade() -> None:
    op.execute("DELETE FROM outbox WHERE job_id IS NULL")
    _set_nullable(False)
