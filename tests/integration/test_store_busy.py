"""An API request that meets a locked or busy database answers 503, never 500.

Only an unreachable database used to answer 503 (docs/reliability.md, "Dependency
outages"); a lock held too long (SQLite ``database is locked`` once its busy timeout ran
out, PostgreSQL's ``lock_timeout``, SQLSTATE 55P03) answered 500 with a traceback in the
log. Every transient store error (:func:`gateway.store.engine.errors.transient`) now answers
503 problem+json with ``Retry-After``, and the refused request changes no row. Real
locks on both backends: another connection holds the database's write lock (SQLite) or
an exclusive lock on ``jobs`` (PostgreSQL) while the gateway's wait is kept short.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.middleware import STORE_RETRY_AFTER_S
from gateway.store.engine import db
from tests.support.databases import database_url_for, migrate, pg_admin
from tests.support.gateway import VERSION, GatewayHarness, settings_dict

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

LOCK_WAIT_MS = 300


@asynccontextmanager
async def _short_lock_waits(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                            ) -> AsyncIterator[str]:
    """A fresh database on ``backend`` whose lock waits give up after ``LOCK_WAIT_MS``."""
    async with database_url_for(backend, tmp_path) as url:
        if backend == "sqlite":
            monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_S", LOCK_WAIT_MS / 1000)
        else:
            name = url.rsplit("/", 1)[1]
            await pg_admin(f"ALTER DATABASE \"{name}\" SET lock_timeout = '{LOCK_WAIT_MS}ms'")
        await migrate(url)
        yield url


@asynccontextmanager
async def _locked(backend: str, url: str) -> AsyncIterator[None]:
    """Another connection holds the lock every write of the gateway needs."""
    if backend == "sqlite":
        holder = sqlite3.connect(url.split("///", 1)[1], isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.rollback()
            holder.close()
        return
    holder = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with holder.transaction():
            await holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await holder.close()


async def _rows(gateway: GatewayHarness) -> dict[str, Any]:
    async with gateway.store.engine.connect() as conn:
        jobs = await conn.exec_driver_sql("SELECT id, state, cancel_requested_at FROM jobs")
        outbox = await conn.exec_driver_sql("SELECT count(*) FROM outbox")
        return {"jobs": sorted(map(tuple, jobs)), "outbox": outbox.scalar()}


async def test_a_request_that_meets_a_locked_database_answers_503_with_retry_after(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: Callable[..., Any], caplog: pytest.LogCaptureFixture,
) -> None:
    async with _short_lock_waits(backend, tmp_path, monkeypatch) as url:
        settings = Settings(**settings_dict(url, str(tmp_path / "assets")))
        app = create_app(settings, run_loops=False)
        gateway = GatewayHarness(app=app, client=await aiohttp_client(app))
        first = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
        before = await _rows(gateway)
        requests = [
            ("POST", "/v1/predictions", {"version": VERSION, "input": {"prompt": "y"}}),
            ("POST", f"/v1/predictions/{first['id']}/cancel", None),
        ]
        if backend == "postgres":  # the exclusive lock stops readers too
            requests += [("GET", f"/v1/predictions/{first['id']}", None),
                         ("GET", "/v1/predictions", None)]
        answers = []
        with caplog.at_level(logging.WARNING):
            async with _locked(backend, url):
                for method, path, body in requests:
                    response = await gateway.client.request(
                        method, path, json=body, headers=gateway.headers
                    )
                    problem = await response.json(content_type=None)
                    answers.append((path, response.status, response.content_type,
                                    response.headers.get("Retry-After"), problem.get("status")))
        assert answers == [
            (path, 503, "application/problem+json", str(STORE_RETRY_AFTER_S), 503)
            for _, path, _ in requests
        ]
        assert not [r for r in caplog.records if r.getMessage() == "unhandled_error"]
        assert await _rows(gateway) == before  # a refused request changes nothing
        await gateway.create({"version": VERSION, "input": {"prompt": "z"}})  # and it passes

