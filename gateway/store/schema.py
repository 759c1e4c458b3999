"""The store's tables (SQLAlchemy 2 Core metadata), shared by SQLite and PostgreSQL.

The alembic migrations in ``gateway/store/migrations`` create exactly these tables;
tests/integration/test_schema_migrations.py checks that the migrated schema matches this
metadata (and tests/unit/test_fresh_sqlite_schema.py that a fresh SQLite store made from
``sqlite_head.sql`` is the migrated one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from contracts.auth import DEFAULT_TENANT, TENANT_CHARS

__all__ = [
    "assets",
    "console_sessions",
    "endpoints",
    "files",
    "jobs",
    "metadata",
    "outbox",
    "provider_events",
    "route_changes",
    "routes",
    "secrets",
    "shadow_comparisons",
    "shadow_replays",
]

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("raw_status", sa.String(64)),
    sa.Column("model", sa.String(255), nullable=False),
    sa.Column("version", sa.String(64), nullable=False),
    sa.Column("deployment", sa.String(255)),
    sa.Column("route", sa.String(255), nullable=False),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("provider_job_id", sa.String(255)),
    sa.Column("target", sa.String(255)),
    sa.Column("input", sa.JSON, nullable=False),
    sa.Column("output", sa.JSON),
    # A failed output check's provider output, for operators (gateway/translation/conformance.py).
    sa.Column("raw_output", sa.JSON),
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
    sa.Column("lost_at", UTCDateTime),
    sa.Column("webhook", sa.Text),
    sa.Column("webhook_events_filter", sa.JSON),
    sa.Column("idempotency_key", sa.String(255), unique=True),
    sa.Column("request_hash", sa.String(64)),
    sa.Column("callback_token", sa.String(64), nullable=False),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("leased_until", UTCDateTime),
    sa.Column("stream", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("data_removed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("owner", sa.String(64)),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("arm", sa.String(16), nullable=False, server_default="control"),
    sa.Column("shadow_of", sa.String(26)),
    sa.Column("tenant", sa.String(TENANT_CHARS), nullable=False, server_default=DEFAULT_TENANT),
    sa.Column("adopted", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("upstream", sa.JSON),  # an adopted prediction's object at the legacy provider
    # raised by a trigger on every UPDATE (migration 0012): GET's cache key, never written
    sa.Column("row_version", sa.BigInteger, nullable=False, server_default="0"),
    # the replay that made this shadow (migration 0013, gateway/store/replays.py)
    sa.Column("replay_id", sa.String(26)),
    sa.Index("ix_jobs_state_next_attempt_at", "state", "next_attempt_at"),
    sa.Index("ix_jobs_route_completed_at", "route", "completed_at"),
    sa.Index("ix_jobs_shadow_of", "shadow_of"),
    sa.Index("ix_jobs_created_at_id", "created_at", "id"),
    sa.Index("ix_jobs_tenant_created_at_id", "tenant", "created_at", "id"),  # a tenant's list
    sa.Index("ix_jobs_data_removed_completed_at", "data_removed", "completed_at"),
    # one replay sends one recorded input to one arm once (a resume never resends it)
    sa.Index("ix_jobs_replay_id_shadow_of_arm", "replay_id", "shadow_of", "arm", unique=True),
)

provider_events = sa.Table(
    "provider_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("event_key", sa.String(64), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("received_at", UTCDateTime, nullable=False),
    sa.Column("processed_at", UTCDateTime),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("leased_until", UTCDateTime),
    sa.UniqueConstraint("job_id", "event_key"),
    sa.Index("ix_provider_events_processed_at_id", "processed_at", "id"),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("msg_id", sa.String(64), nullable=False, unique=True),
    # None: an operator webhook event (docs/webhooks.md, "Operator webhook"), no prediction's.
    sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id")),
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
    sa.Index("ix_outbox_status_next_attempt_at", "status", "next_attempt_at"),
    sa.Index("ix_outbox_job_id_id", "job_id", "id"),
    sa.Index("ix_outbox_delivered_at", "delivered_at"),
)

assets = sa.Table(
    "assets",
    metadata,
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("content_type", sa.String(255), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_assets_job_id", "job_id"),
)

files = sa.Table(
    "files",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
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
    sa.Index("ix_files_owner_created_at_id", "owner", "created_at", "id"),
    sa.Index("ix_files_expires_at", "expires_at"),
)

endpoints = sa.Table(
    "endpoints",
    metadata,
    sa.Column("url", sa.String(2048), primary_key=True),
    sa.Column("disabled_at", UTCDateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
)

secrets = sa.Table(
    "secrets",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

routes = sa.Table(
    "routes",
    metadata,
    sa.Column("key", sa.String(320), primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("config_hash", sa.String(64), nullable=False),
    sa.Column("changed_live", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

route_changes = sa.Table(
    "route_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("route", sa.String(320), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("who", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("before", sa.JSON),
    sa.Column("after", sa.JSON, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("evidence", sa.JSON),
    sa.Index("ix_route_changes_route_id", "route", "id"),
)

# One compared shadow pair (docs/shadow.md, "How the gateway uses it"), written once when
# it is first read with both ends terminal; deleted with either end's data (retention).
shadow_comparisons = sa.Table(
    "shadow_comparisons",
    metadata,
    sa.Column("shadow_id", sa.String(26), primary_key=True),
    sa.Column("primary_id", sa.String(26), nullable=False),
    sa.Column("route", sa.String(320), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("compared_at", UTCDateTime, nullable=False),
    sa.Column("comparison", sa.JSON, nullable=False),
    sa.Column("replay_id", sa.String(26)),  # a replay's pair (None: live traffic's)
    sa.Index("ix_shadow_comparisons_route_kind_created_at", "route", "kind", "created_at"),
    sa.Index("ix_shadow_comparisons_primary_id", "primary_id"),
    sa.Index("ix_shadow_comparisons_replay_id_kind", "replay_id", "kind"),
)

# A replay of a route's recorded inputs against its candidate (docs/cutover-day.md,
# "Replaying recorded inputs"): the window and size asked for, its state (running,
# stopped, finished), its counts, the position of the last input it handed out
# (``cursor_at``, ``cursor_id``: newest first), and the gateway process leasing it.
shadow_replays = sa.Table(
    "shadow_replays",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column("route", sa.String(320), nullable=False),
    sa.Column("tenant", sa.String(64)),  # only this tenant's inputs (None: every tenant's)
    sa.Column("since", UTCDateTime),
    sa.Column("until", UTCDateTime, nullable=False),  # inputs created before the start
    sa.Column("max_inputs", sa.Integer),
    sa.Column("baseline_percent", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("total", sa.Integer, nullable=False, server_default="0"),
    sa.Column("sent", sa.Integer, nullable=False, server_default="0"),
    sa.Column("skipped", sa.Integer, nullable=False, server_default="0"),
    sa.Column("jobs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("cursor_at", UTCDateTime),
    sa.Column("cursor_id", sa.String(26)),
    sa.Column("who", sa.String(128), nullable=False),
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("leased_until", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime),
    sa.Index("ix_shadow_replays_route_created_at", "route", "created_at"),
    sa.Index("ix_shadow_replays_state", "state"),
)

# A console sign-in (docs/console.md, "Sessions"): the SHA-256 of the opaque session id
# the browser holds (never the id, never the admin token: only its digest), the CSRF
# token its forms carry, and its idle and absolute ends. Signing out deletes the row.
console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),
    sa.Column("token_digest", sa.String(64), nullable=False),
    sa.Column("csrf_token", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("seen_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
)
