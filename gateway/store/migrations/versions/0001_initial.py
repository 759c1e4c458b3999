"""The initial store: jobs, provider events, outbox, assets, endpoints, secrets.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("raw_status", sa.String(64)),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("deployment", sa.String(255)),
        sa.Column("route", sa.String(255), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("provider_job_id", sa.String(255)),
        sa.Column("input", sa.JSON, nullable=False),
        sa.Column("output", sa.JSON),
        sa.Column("logs", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("metrics", sa.JSON),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("submitted_at", UTCDateTime),
        sa.Column("started_at", UTCDateTime),
        sa.Column("completed_at", UTCDateTime),
        sa.Column("deadline", UTCDateTime),
        sa.Column("cancel_requested_at", UTCDateTime),
        sa.Column("cancel_sent_at", UTCDateTime),
        sa.Column("webhook", sa.Text),
        sa.Column("webhook_events_filter", sa.JSON),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("callback_token", sa.String(64), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("leased_until", UTCDateTime),
        sa.Column("stream", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("data_removed", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.UniqueConstraint("idempotency_key", name="uq_jobs_idempotency_key"),
    )
    op.create_index("ix_jobs_state_next_attempt_at", "jobs", ["state", "next_attempt_at"])
    op.create_index("ix_jobs_created_at_id", "jobs", ["created_at", "id"])

    op.create_table(
        "provider_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("event_key", sa.String(64), nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("processed_at", UTCDateTime),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("leased_until", UTCDateTime),
        sa.UniqueConstraint("job_id", "event_key", name="uq_provider_events_job_id_event_key"),
    )
    op.create_index(
        "ix_provider_events_processed_at_id", "provider_events", ["processed_at", "id"]
    )

    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("msg_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime),
        sa.Column("last_attempt_at", UTCDateTime),
        sa.Column("delivered_at", UTCDateTime),
        sa.Column("last_status_code", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("leased_until", UTCDateTime),
        sa.UniqueConstraint("msg_id", name="uq_outbox_msg_id"),
    )
    op.create_index("ix_outbox_status_next_attempt_at", "outbox", ["status", "next_attempt_at"])
    op.create_index("ix_outbox_job_id_id", "outbox", ["job_id", "id"])

    op.create_table(
        "assets",
        sa.Column("key", sa.String(512), primary_key=True),
        sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_assets_job_id", "assets", ["job_id"])

    op.create_table(
        "endpoints",
        sa.Column("url", sa.String(2048), primary_key=True),
        sa.Column("disabled_at", UTCDateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    for table in ("secrets", "endpoints", "assets", "outbox", "provider_events", "jobs"):
        op.drop_table(table)
