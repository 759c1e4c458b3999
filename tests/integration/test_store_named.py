"""A store the gateway cannot use is named with the driver's reason, in one line.

Found by hand: a database name or user misspelt in ``database_url`` made ``serve`` print
SQLAlchemy's traceback and ``cutover routes`` say only "(DBAPIError)"; an in-memory SQLite
URL was a ``TypeError`` traceback from ``create_engine``.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from gateway import cli
from tests.support.databases import PG_ADMIN_DSN

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

CONFIG = """
[gateway]
api_tokens = ["r8_test"]
storage_url = "file://{tmp}/assets"
[providers.local-cog]
kind = "cog"
base_url = "http://127.0.0.1:5000"
[[routes]]
model = "acme/echo"
provider = "local-cog"
"""


def _store(backend: str) -> tuple[str, str]:
    """A database_url that cannot be used, and what the answer must say about it."""
    if backend == "sqlite":
        return "sqlite+aiosqlite://", "names no file: the job store must outlive the process"
    missing = make_url(PG_ADMIN_DSN).set(drivername="postgresql+asyncpg",
                                         database="cutover_no_such_db")
    return (missing.render_as_string(hide_password=False),
            'InvalidCatalogNameError: database "cutover_no_such_db" does not exist')


def test_an_unusable_store_is_named_with_its_reason(
    backend: str, tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, says = _store(backend)
    config = tmp_path / "cutover.toml"
    config.write_text(CONFIG.format(tmp=tmp_path))
    monkeypatch.setenv("CUTOVER_GATEWAY__DATABASE_URL", url)
    assert cli.main(["routes", "list", "--config", str(config)]) == 1
    assert cli.main(["serve", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if not line.startswith("{")] == [
        line for line in lines if line.startswith("cutover: ")
    ], lines  # no traceback
    routes, serve = [line for line in lines if line.startswith("cutover: ")]
    assert says in routes and says in serve, (routes, serve)
