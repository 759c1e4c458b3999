"""A ``replicate`` provider behind a private CA: a second cutover over HTTPS (issue 20).

The upstream is the real gateway app, in-process, served over HTTPS with a certificate of
a trustme CA (tests/support/tls.py), in front of its fake provider; the gateway under test
(the ``backend`` fixture: SQLite, docs/testing.md) routes ``acme/echo`` to it as a
``replicate`` provider. With ``ca_file`` naming the CA the prediction succeeds through
both; without it every submit fails "certificate verify failed", and the prediction fails
with that reason once ``submit_timeout_s`` has passed (the clock is moved, not waited
for), instead of staying ``starting`` until ``max_job_lifetime_s``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.fake import FakeAdapter
from contracts.job import JobState
from gateway.app import LOOPS, create_app
from gateway.config import Settings
from gateway.dispatcher import Dispatcher
from gateway.http import keys
from tests.support.clock import MovableClock
from tests.support.gateway import TOKEN, VERSION, GatewayHarness, settings_dict
from tests.support.tls import ServerTLS, make_tls
from tests.support.waiting import wait_until

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

SUBMIT_TIMEOUT_S = 5.0


@dataclass
class Upstream:
    """The second cutover: its app, its HTTPS URL and its CA."""

    app: web.Application
    url: str
    tls: ServerTLS

    @property
    def fake(self) -> FakeAdapter:
        adapter = self.app[keys.PROVIDERS]["fake"].adapter
        assert isinstance(adapter, FakeAdapter)
        return adapter

    async def settle(self) -> None:
        for _ in range(50):
            if sum([await loop.run_once() for loop in self.app[LOOPS]]) == 0:
                return
        raise AssertionError("the upstream cutover still had work")


@pytest.fixture
async def upstream(tmp_path: Path) -> AsyncIterator[Upstream]:
    tls = make_tls(tmp_path / "tls")
    config = settings_dict(f"sqlite+aiosqlite:///{tmp_path / 'upstream.db'}",
                           str(tmp_path / "upstream-assets"))
    app = create_app(Settings(**config), run_loops=False, clock=MovableClock())
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tls.cert_file, tls.key_file)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Upstream(app, f"https://127.0.0.1:{port}", tls)
    finally:
        await runner.cleanup()


async def _downstream(
    make_gateway: Callable[..., Any], upstream: Upstream, monkeypatch: pytest.MonkeyPatch,
    **provider: Any,
) -> GatewayHarness:
    monkeypatch.setenv("IT_UPSTREAM_TOKEN", TOKEN)
    return await make_gateway(
        # The upstream accepts webhooks to allow-listed 127.0.0.1 only; this one is never
        # answered (the test polls).
        gateway={"callback_url": "http://127.0.0.1:9", "submit_timeout_s": SUBMIT_TIMEOUT_S},
        providers={"up": {"kind": "replicate", "base_url": upstream.url,
                          "token_env": "IT_UPSTREAM_TOKEN", "fetch_interval_s": 1.0,
                          **provider}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "up"}],
    )


async def test_a_private_ca_in_ca_file_reaches_a_second_cutover_over_https(
    make_gateway: Callable[..., Any], upstream: Upstream, monkeypatch: pytest.MonkeyPatch,
):
    gateway = await _downstream(make_gateway, upstream, monkeypatch,
                                ca_file=str(upstream.tls.ca_file))
    created = await gateway.create({"version": VERSION, "input": {"prompt": "hello"}},
                                   Prefer="respond-async")
    await gateway.settle()
    submitted = await gateway.store.get(created["id"])
    assert submitted.provider_job_id, submitted.raw_status  # the upstream took it

    await upstream.settle()  # the upstream hands it to its fake provider
    upstream.fake.set_state(submitted.provider_job_id, JobState.COMPLETED, output="HELLO")

    async def finished() -> dict[str, Any] | None:
        upstream.app[keys.CLOCK].advance(2.0)  # its poll of the fake falls due
        await upstream.settle()
        gateway.clock.advance(2.0)  # and this gateway's poll of the upstream
        prediction = await gateway.get(created["id"])
        await gateway.settle()
        return prediction if prediction["status"] == "succeeded" else None

    done = await wait_until(finished, 20.0, what="the prediction succeeded through HTTPS")
    assert done["output"] == "HELLO"


async def test_without_ca_file_the_prediction_fails_certificate_verify_failed_within_submit_timeout_s(  # noqa: E501
    make_gateway: Callable[..., Any], upstream: Upstream, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    gateway = await _downstream(make_gateway, upstream, monkeypatch)
    created = await gateway.create({"version": VERSION, "input": {"prompt": "hello"}},
                                   Prefer="respond-async")
    dispatcher = next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Dispatcher))
    assert await dispatcher.run_once() == 1  # one submit (settle would retry for seconds)
    first = await gateway.get(created["id"])
    assert first["status"] == "starting", first["error"]  # retried until submit_timeout_s
    assert any("certificate verify failed" in str(getattr(r, "error", ""))
               for r in caplog.records), "the gateway log names the TLS failure"

    gateway.clock.advance(SUBMIT_TIMEOUT_S)
    await gateway.settle()
    failed = await gateway.get(created["id"])
    assert failed["status"] == "failed"
    assert "certificate verify failed" in failed["error"]
    assert "cannot connect" not in failed["error"]
    assert "submit_timeout_s" in failed["error"]
    assert "certificate verify failed" in (failed["logs"] or "")
    took = (datetime.fromisoformat(failed["completed_at"])
            - datetime.fromisoformat(failed["created_at"])).total_seconds()
    assert took <= SUBMIT_TIMEOUT_S + 2.0  # the time moved, plus this test's own work
