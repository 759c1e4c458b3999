"""The store's engine layer: the database engine and its connections, the inline SQLite
connection and fast writes, group commit, WAL checkpoints and bringing a fresh database to
the schema head (docs/storage.md). The only modules that talk to the drivers (``sqlite3``,
``aiosqlite``, ``asyncpg``); the repositories in ``gateway.store`` build on them."""
