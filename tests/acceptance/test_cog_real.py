"""CogAdapter against the REAL Cog server (coglet 0.23.1) running examples/echo.

Webhooks go to a tiny aiohttp receiver on 127.0.0.1 (port 0). Every wait is on a
condition with a deadline: the receiver notifies on each webhook, and the server's
health is polled under ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from adapters.cog import CogAdapter
from contracts.errors import ProviderBusy, UpstreamRejected, WebhookVerificationError
from contracts.job import JobState
from contracts.snapshot import ProviderRef, ProviderSnapshot, SubmitRequest
from tests.support.cog_server import CogServer
from tests.support.fixtures import (  # noqa: F401
    COG_WEBHOOK_TOKEN,
    cog_server,
    cog_server_with_schema,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cog

DEADLINE_S = 30.0
LONG_RUN = {"steps": 100, "delay": 0.1}  # ten seconds unless canceled


class Receiver:
    """Records webhook calls (headers, raw body) and wakes up whoever waits on them."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.url = ""
        self._changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with self._changed:
            self.calls.append((dict(request.headers), body))
            self._changed.notify_all()
        return web.Response(status=200)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)


class Session:
    """One test's view: the adapter, the receiver, and the jobs it started."""

    def __init__(self, adapter: CogAdapter, receiver: Receiver, server: CogServer) -> None:
        self.adapter = adapter
        self.receiver = receiver
        self.server = server
        self.refs: list[ProviderRef] = []

    async def submit(self, **model_input: Any) -> tuple[ProviderRef, ProviderSnapshot]:
        job_id = f"it-{uuid.uuid4().hex}"
        request = SubmitRequest(
            job_id=job_id, input={"prompt": "hello cog", **model_input},
            webhook_url=f"{self.receiver.url}/{job_id}", model="acme/echo", version="hidden",
        )
        ref = ProviderRef(job_id=job_id, provider_job_id=job_id, input=request.input,
                          webhook_url=request.webhook_url)
        self.refs.append(ref)
        return ref, await self.adapter.submit(request)

    def events(self, ref: ProviderRef) -> list[ProviderSnapshot]:
        """Webhooks received for ``ref``, verified and parsed by the adapter, in order."""
        parsed = []
        for headers, body in self.receiver.calls:
            self.adapter.check_bearer(headers)
            parsed.append(self.adapter.parse_webhook(body))
        return [event for event in parsed if event.provider_job_id == ref.provider_job_id]

    def terminal(self, ref: ProviderRef) -> ProviderSnapshot | None:
        return next((e for e in self.events(ref) if e.state.terminal), None)

    async def wait_terminal(self, ref: ProviderRef) -> ProviderSnapshot:
        await self.receiver.wait_for(lambda: self.terminal(ref) is not None)
        snapshot = self.terminal(ref)
        assert snapshot is not None
        return snapshot

    async def wait_started(self, ref: ProviderRef) -> None:
        await self.receiver.wait_for(
            lambda: any(e.state is JobState.RUNNING for e in self.events(ref))
        )

    async def wait_logged(self, ref: ProviderRef, text: str) -> None:
        await self.receiver.wait_for(lambda: any(text in (e.logs or "") for e in self.events(ref)))

    async def wait_idle(self, timeout_s: float = DEADLINE_S) -> None:
        """Poll Cog's health until READY (its one slot is free)."""
        async with httpx.AsyncClient(base_url=self.server.url) as client:

            async def ready() -> None:
                while (await client.get("/health-check")).json()["status"] != "READY":
                    await asyncio.sleep(0.02)

            await asyncio.wait_for(ready(), timeout_s)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/{job_id}", hooks.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    hooks.url = f"http://{host}:{port}/hooks"
    yield hooks
    await runner.cleanup()


@contextlib.asynccontextmanager
async def open_session(server: CogServer, receiver: Receiver) -> AsyncIterator[Session]:
    adapter = CogAdapter(
        name="local-cog", base_url=server.url, webhook_auth_token=COG_WEBHOOK_TOKEN
    )
    session = Session(adapter, receiver, server)
    await session.wait_idle()
    try:
        yield session
    finally:
        for ref in session.refs:  # leave the one slot free for the next test
            await adapter.cancel(ref)
        await session.wait_idle()
        await adapter.aclose()


@pytest.fixture
async def cog(cog_server: CogServer, receiver: Receiver) -> AsyncIterator[Session]:  # noqa: F811
    async with open_session(cog_server, receiver) as session:
        yield session


@pytest.fixture
async def cog_schema(
    cog_server_with_schema: CogServer, receiver: Receiver  # noqa: F811
) -> AsyncIterator[Session]:
    async with open_session(cog_server_with_schema, receiver) as session:
        yield session


async def test_submit_receives_start_logs_output_and_completed_webhooks(cog: Session):
    ref, first = await cog.submit(steps=2, delay=0.3)
    assert (first.provider_job_id, first.state, first.raw_status) == (
        ref.job_id, JobState.QUEUED, "starting"
    )

    def has_output_and_end() -> bool:
        events = cog.events(ref)
        return any(e.output == ["HELLO COG"] for e in events) and cog.terminal(ref) is not None

    await cog.receiver.wait_for(has_output_and_end)  # output may arrive after completed
    events = cog.events(ref)
    assert events[0].raw_status == "processing"  # the start event (§1.5)
    assert any(not e.state.terminal and "step 1/2" in (e.logs or "") for e in events)
    final = cog.terminal(ref)
    assert final is not None
    assert (final.state, final.output) == (JobState.COMPLETED, "HELLO COG")
    assert final.logs == "step 1/2\nstep 2/2\n"
    assert final.metrics["predict_time"] > 0


async def test_webhooks_carry_the_bearer_token_and_a_wrong_token_is_refused(cog: Session):
    ref, _ = await cog.submit(steps=0)
    await cog.wait_terminal(ref)
    other = CogAdapter(name="other", base_url=cog.server.url, webhook_auth_token="not-it")
    try:
        for headers, _body in cog.receiver.calls:
            assert headers["Authorization"] == f"Bearer {COG_WEBHOOK_TOKEN}"
            with pytest.raises(WebhookVerificationError):
                other.check_bearer(headers)
    finally:
        await other.aclose()


async def test_file_outputs_arrive_as_data_uris(cog: Session):
    ref, _ = await cog.submit(steps=0, output_kind="files")
    final = await cog.wait_terminal(ref)
    assert final.state is JobState.COMPLETED
    text_uri, blob_uri = final.output
    assert text_uri.startswith("data:text/plain")
    assert blob_uri.startswith("data:application/octet-stream")
    assert base64.b64decode(text_uri.partition(",")[2]) == b"HELLO COG"
    assert base64.b64decode(blob_uri.partition(",")[2]) == bytes(range(256)) * 4


async def test_a_failing_model_ends_failed_with_its_error(cog: Session):
    """coglet 0.23.1 reports ``Prediction failed: Prediction failed: ValueError: ...``;
    the adapter keeps the model's part, as Replicate shows it (docs/cog.md §1.5)."""
    ref, _ = await cog.submit(fail=True)
    final = await cog.wait_terminal(ref)
    assert final.state is JobState.FAILED
    assert final.error == "ValueError: asked to fail: hello cog"


async def test_submit_while_the_only_slot_is_busy_raises_provider_busy(cog: Session):
    running, _ = await cog.submit(**LONG_RUN)
    await cog.wait_started(running)
    with pytest.raises(ProviderBusy, match="409"):
        await cog.submit(steps=0)
    assert await cog.adapter.cancel(cog.refs[-1]) is False  # the refused one never started
    assert await cog.adapter.cancel(running) is True


async def test_cancel_in_flight_ends_canceled(cog: Session):
    ref, _ = await cog.submit(**LONG_RUN)
    await cog.wait_started(ref)
    assert await cog.adapter.cancel(ref) is True
    final = await cog.wait_terminal(ref)
    assert final.state is JobState.CANCELED
    await cog.wait_idle()
    assert await cog.adapter.cancel(ref) is False  # finished: Cog forgot it (404)


async def test_fetch_probe_on_a_running_job_returns_its_snapshot(cog: Session):
    ref, _ = await cog.submit(**LONG_RUN)
    await cog.wait_logged(ref, "step 1/100")
    snapshot = await cog.adapter.fetch(ref)
    assert (snapshot.provider_job_id, snapshot.state, snapshot.lost) == (
        ref.job_id, JobState.RUNNING, False
    )
    assert (snapshot.logs or "").startswith("step 1/100")
    # The probe changed nothing: the job still runs and its own webhook still fires.
    assert await cog.adapter.cancel(ref) is True
    assert (await cog.wait_terminal(ref)).state is JobState.CANCELED


def lost_how(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.how for r in caplog.records if getattr(r, "event", "") == "cog.prediction_lost"]


async def test_fetch_probe_after_completion_reports_lost_without_running_the_model(
    cog: Session, caplog: pytest.LogCaptureFixture
):
    ref, _ = await cog.submit(steps=3, delay=0.1)
    await cog.wait_terminal(ref)
    await cog.wait_idle()
    calls_before = len(cog.receiver.calls)
    with caplog.at_level(logging.WARNING, logger="adapters.cog"):
        snapshot = await cog.adapter.fetch(ref)
    assert (snapshot.state, snapshot.lost) == (JobState.FAILED, True)
    assert "outcome was lost" in (snapshot.error or "")
    assert lost_how(caplog) == ["probe created"]  # case (c) on an image without a schema
    await cog.wait_idle(timeout_s=2.0)  # the stray failed at input validation at once
    assert await cog.adapter.cancel(ref) is False
    assert len(cog.receiver.calls) == calls_before  # the probe sent no webhook

    def refused_in_log() -> list[str] | None:  # Cog writes its log line after it is idle
        log = cog.server.log_tail(400).splitlines()
        found = any(ref.job_id in line and "Input must be a JSON object" in line for line in log)
        return log if found else None

    log = await wait_until(refused_in_log, what="Cog's log refusing the probe's input")
    assert sum(ref.job_id in line and "step 1/3" in line for line in log) == 1  # ran once


async def test_fetch_probe_while_another_job_holds_the_slot_reports_lost(
    cog: Session, caplog: pytest.LogCaptureFixture
):
    done, _ = await cog.submit(steps=0)
    await cog.wait_terminal(done)
    await cog.wait_idle()
    holder, _ = await cog.submit(**LONG_RUN)
    await cog.wait_started(holder)
    with caplog.at_level(logging.WARNING, logger="adapters.cog"):
        snapshot = await cog.adapter.fetch(done)
    assert (snapshot.state, snapshot.lost) == (JobState.FAILED, True)
    assert lost_how(caplog) == ["probe refused"]  # case (d): 409, nothing started
    still = await cog.adapter.fetch(holder)  # the other job is untouched
    assert (still.state, still.lost) == (JobState.RUNNING, False)


async def test_schema_image_rejects_a_bad_input_with_cogs_field_messages(cog_schema: Session):
    with pytest.raises(UpstreamRejected, match="422") as caught:
        await cog_schema.submit(steps="many")
    assert "input.steps" in caught.value.detail


async def test_fetch_probe_on_a_schema_image_sees_running_then_lost(
    cog_schema: Session, caplog: pytest.LogCaptureFixture
):
    ref, _ = await cog_schema.submit(steps=4, delay=0.2)
    await cog_schema.wait_started(ref)
    running = await cog_schema.adapter.fetch(ref)  # the probe input is not validated in flight
    assert (running.state, running.lost) == (JobState.RUNNING, False)
    final = await cog_schema.wait_terminal(ref)
    assert final.state is JobState.COMPLETED
    await cog_schema.wait_idle()
    with caplog.at_level(logging.WARNING, logger="adapters.cog"):
        lost = await cog_schema.adapter.fetch(ref)
    assert (lost.state, lost.lost) == (JobState.FAILED, True)
    assert lost_how(caplog) == ["probe refused"]  # 422: nothing was created
