"""Fixtures shared by every tier.

``backend`` runs a test on SQLite and on PostgreSQL (``CUTOVER_TEST_BACKENDS`` narrows
it); ``gateway`` is an in-process app with a fake provider on that backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import Settings
from tests.support.clock import MovableClock
from tests.support.databases import (
    BACKENDS,
    database_url_for,
    migrate,
    reset_database,
    run_sync,
    sync_database,
)
from tests.support.fixtures import (  # noqa: F401 (shared fixtures)
    cog_server,
    https_cog,
    s3_server,
    tls,
)
from tests.support.gateway import GatewayHarness, settings_dict


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def shared_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One migrated PostgreSQL database for the session; tests empty it before use."""
    with sync_database("postgres", tmp_path_factory.mktemp("pg")) as url:
        run_sync(migrate(url))
        yield url


@pytest.fixture
async def database_url(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A database with no rows: a SQLite file, or the session's emptied PostgreSQL one."""
    if backend == "sqlite":
        async with database_url_for(backend, tmp_path) as url:
            yield url
        return
    url = request.getfixturevalue("shared_postgres")
    await reset_database(url)
    yield url


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**sections: Any) -> Settings:
        return Settings(**settings_dict(database_url, str(tmp_path / "assets"), **sections))

    return make


@pytest.fixture
async def make_gateway(
    make_settings: Callable[..., Settings],
    aiohttp_client: Callable[..., Any],
) -> Callable[..., Any]:
    async def make(**sections: Any) -> GatewayHarness:
        app = create_app(make_settings(**sections), run_loops=False, clock=MovableClock())
        client: TestClient = await aiohttp_client(app)
        return GatewayHarness(app=app, client=client)

    return make


@pytest.fixture
async def gateway(make_gateway: Callable[..., Any]) -> GatewayHarness:
    return await make_gateway()
