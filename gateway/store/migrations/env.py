"""Alembic environment: migrations run on a connection the gateway hands over.

``gateway.store.engine.db.migrate`` opens the connection (async engine, ``run_sync``) and
passes it in ``config.attributes["connection"]``; there is no offline mode.
"""

from __future__ import annotations

from alembic import context

from gateway.store import schema

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=schema.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
