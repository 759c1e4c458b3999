"""shadow_replays: a replay of a route's recorded inputs against its candidate, and the
``replay_id`` of the shadow jobs and comparisons it made (docs/cutover-day.md,
"Replaying recorded inputs").

``jobs.replay_id`` is indexed together with ``shadow_of`` and ``arm``, uniquely: one
replay sends one input to one arm once, so a resumed replay (or a second gateway process
that took over its lease) cannot send an input again. Live shadows have no replay id
(NULL never collides). ``jobs`` gains its column by ``ALTER TABLE ADD COLUMN``, not a
batch rebuild, which would drop 0012's trigger on SQLite; the downgrade's rebuild
creates that trigger again.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

from gateway.store.schema import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

SQLITE_TRIGGER = (  # as 0012 made it
    "CREATE TRIGGER jobs_row_version AFTER UPDATE ON jobs FOR EACH ROW "
    "WHEN NEW.row_version = OLD.row_version BEGIN "
    "UPDATE jobs SET row_version = OLD.row_version + 1 WHERE id = NEW.id; END"
)


def upgrade() -> None:
    op.create_table(
        "shadow_replays",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("route", sa.String(320), nullable=False),
        sa.Column("tenant", sa.String(64)),
        sa.Column("since", UTCDateTime),
        sa.Column("until", UTCDateTime, nullable=False),
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
        sa.PrimaryKeyConstraint("id", name="pk_shadow_replays"),
    )
    op.create_index("ix_shadow_replays_route_created_at", "shadow_replays",
                    ["route", "created_at"])
    op.create_index("ix_shadow_replays_state", "shadow_replays", ["state"])
    op.add_column("jobs", sa.Column("replay_id", sa.String(26)))
    op.create_index("ix_jobs_replay_id_shadow_of_arm", "jobs", ["replay_id", "shadow_of", "arm"],
                    unique=True)
    op.add_column("shadow_comparisons", sa.Column("replay_id", sa.String(26)))
    op.create_index("ix_shadow_comparisons_replay_id_kind", "shadow_comparisons",
                    ["replay_id", "kind"])


def downgrade() -> None:
    op.drop_index("ix_shadow_comparisons_replay_id_kind", "shadow_comparisons")
    with op.batch_alter_table("shadow_comparisons") as batch:
        batch.drop_column("replay_id")
    op.drop_index("ix_jobs_replay_id_shadow_of_arm", "jobs")
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("replay_id")
    if sqlite:  # the batch rebuilt the table without 0012's trigger
        op.execute("DROP TRIGGER IF EXISTS jobs_row_version")
        op.execute(SQLITE_TRIGGER)
    op.drop_index("ix_shadow_replays_state", "shadow_replays")
    op.drop_index("ix_shadow_replays_route_created_at", "shadow_replays")
    op.drop_table("shadow_replays")
