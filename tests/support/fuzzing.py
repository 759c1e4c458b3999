"""The gateway under fuzzing: served on a loop of its own thread, checked per request.

:class:`Live` runs the real app in-process on SQLite with its background loops stopped
(so rows change only through requests) on 127.0.0.1 (port 0), in a thread, so that
synchronous Hypothesis tests (tests/fuzz/) can drive it with the aiohttp test client
(:meth:`Live.check`) or over plain HTTP from another client (:meth:`Live.verdict`, used
with schemathesis). The properties are those of docs/reliability.md, "Fuzzing": no 5xx;
every refusal is problem+json whose ``status`` is the HTTP status; a refused request
changes no row of any table.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, Phase, settings

from gateway.app import create_app
from gateway.config import Settings
from gateway.http import keys
from gateway.store.schema import jobs, metadata
from tests.support.gateway import TOKEN, settings_dict

__all__ = ["ADMIN_TOKEN", "AUTH", "FUZZ", "Live"]

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ADMIN_TOKEN = "adm_fuzz_token"  # a test value, not a credential
FUZZ = settings(
    deadline=None, database=None, derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is shown as found
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Live:
    """The app on a loop of its own thread; :meth:`call` runs one request there.

    Parameters
    ----------
    tmp : Path
        Where the SQLite file and the owned files go.
    **sections
        Configuration sections merged over the test configuration (``settings_dict``).
    """

    def __init__(self, tmp: Path, **sections: Any) -> None:
        gateway = {"prefer_wait_max_s": 0.1, **sections.pop("gateway", {})}
        config = settings_dict(  # prefer_wait_max_s: the loops are stopped, no long holds
            f"sqlite+aiosqlite:///{tmp / 'fuzz.db'}", str(tmp / "assets"),
            gateway=gateway, **sections,
        )
        self._settings = Settings(**config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.client: TestClient = self._run(self._start())
        self.requests = 0
        self.tests: set[str] = set()
        self.statuses: dict[int, int] = {}
        self.snapshot = self.rows()
        self.prediction_id = ""  # a prediction the suite made, when it made one

    async def _start(self) -> TestClient:
        app = create_app(self._settings, run_loops=False)
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        return client

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the served app."""
        return str(self.client.make_url("")).rstrip("/")

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    def close(self) -> None:
        self._run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def rows(self) -> tuple[Any, ...]:
        """A fingerprint of every row of every table: counts, the newest change of each
        table that records one, and the jobs' attempts."""

        async def fingerprint() -> tuple[Any, ...]:
            engine = self.client.app[keys.STORE].engine  # type: ignore[index]
            parts: list[Any] = [sa.select(sa.func.sum(jobs.c.attempts)).scalar_subquery()]
            for table in metadata.sorted_tables:
                parts.append(sa.select(sa.func.count()).select_from(table).scalar_subquery())
                if "updated_at" in table.c:
                    parts.append(sa.select(sa.func.max(table.c.updated_at)).scalar_subquery())
            async with engine.connect() as conn:
                return tuple((await conn.execute(sa.select(*parts))).one())

        return tuple(self._run(fingerprint()))

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, str, bytes]:
        async def one() -> tuple[int, str, bytes]:
            async with self.client.request(method, path, **kwargs) as response:
                return response.status, response.content_type, await response.read()

        return self._run(one())

    def check(self, method: str, path: str, **kwargs: Any) -> int:
        """One request and every property of the module docstring; its status."""
        status, content_type, body = self.call(method, path, **kwargs)
        self.verdict(f"{method} {path} {kwargs}", status, content_type, body)
        return status

    def verdict(self, what: str, status: int, content_type: str, body: bytes) -> None:
        """Count an answer made elsewhere and assert every property on it."""
        self.requests += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        assert status < 500, (what, status, body[:300])
        if status >= 400:  # a refusal: problem+json, and no row changed
            assert content_type == "application/problem+json", (what, status, body[:200])
            assert json.loads(body)["status"] == status, (what, body[:200])
            assert self.rows() == self.snapshot, f"refused {what} changed rows"
        else:
            self.snapshot = self.rows()
