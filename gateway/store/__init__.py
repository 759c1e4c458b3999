"""The store: the only home of SQL and the only importer of SQLAlchemy.

``db`` (engine and migrations), ``schema`` (tables), ``jobs`` (the job store and its
guarded transitions), ``outbox`` (webhook events written inside a job's transaction),
``migrations`` (alembic).
"""
