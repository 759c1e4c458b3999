"""The store: the only home of SQL and the only importer of SQLAlchemy.

``db`` (the engine, migrations), ``schema`` (tables), ``jobs`` (the job store and its
guarded transitions), ``outbox`` (webhook events written inside a job's transaction),
``events`` (provider events), ``deliveries`` and ``deadletters`` (outbox rows on their way
out, and back), ``secrets`` (generated secrets), ``lease`` (the one claim helper),
``migrations`` (alembic). Nothing outside this package receives a connection or runs a
statement; the composition root (:mod:`gateway.app`, :mod:`gateway.cli`) creates the
engine and hands it to the classes here.
"""
