"""Fixtures shared by every tier, and the tier and backend of each test (docs/testing.md).

``backend`` is the database a test runs on: SQLite only, unless the test is marked
``every_backend`` (its point is the store's SQL), which runs it on SQLite and on PostgreSQL
(``CUTOVER_TEST_BACKENDS`` narrows the list; ``CUTOVER_TEST_EVERY_BACKEND=1`` runs every
test on every backend). ``gateway`` is an in-process app with a fake provider on that
backend. Each test gets the marker of its tier from its directory (:data:`TIERS`).
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
    DEFAULT_BACKENDS,
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

#: The tier marker of each test directory: ``make check`` runs the fast ones.
TIERS = {
    "unit": "unit",
    "contract": "integration",
    "integration": "integration",
    "security": "integration",
    "fuzz": "integration",
    "acceptance": "acceptance",
    "chaos": "soak",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``backend``: every backend for an ``every_backend`` test, else the first."""
    if "backend" not in metafunc.fixturenames:
        return
    definitions = getattr(metafunc, "_arg2fixturedefs", {}).get("backend", ())
    if definitions and definitions[-1].func is not backend.__wrapped__:  # type: ignore[attr-defined]
        return  # a module's own ``backend`` fixture (the contract suite's SQLite) decides
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "backend" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return  # the test names its backends itself
    every = metafunc.definition.get_closest_marker("every_backend") is not None
    metafunc.parametrize("backend", BACKENDS if every else DEFAULT_BACKENDS, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent
    for item in items:
        parts = item.path.relative_to(root).parts
        tier = TIERS.get(parts[0]) if len(parts) > 1 else None
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(tier)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "postgres":
            item.add_marker("postgres")


@pytest.fixture
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
