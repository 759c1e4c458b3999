"""The adapter contract: the same assertions for every provider kind.

Each test drives a prediction through the real gateway (in process, loops stepped by
``settle``) in front of one provider's fake server, and injects one fault of the list
in docs/providers.md ("Faults the contract suite covers"). A kind that cannot have a
fault (no webhooks, no wire, no timestamp) says so with a skip reason.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import timedelta
from typing import Any

import pytest

from contracts.job import JobState
from gateway.clock import utcnow
from gateway.http import keys
from tests.contract.drivers import Driver, Sent, pump
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

TERMINAL = {"succeeded", "failed", "canceled"}
TEN_MB_PAGE = b"<html><body>" + b"<p>Bad gateway, try again later.</p>" * 290_000 + b"</body>"


async def create(h: GatewayHarness, prompt: str = "hello", **headers: str) -> str:
    prediction = await h.create({"version": VERSION, "input": {"prompt": prompt}}, **headers)
    await pump(h)
    return str(prediction["id"])


async def deliver(h: GatewayHarness, sent: Sent) -> int:
    response = await h.client.post(sent.path, data=sent.body, headers=sent.headers)
    return response.status


async def deliver_all(h: GatewayHarness, driver: Driver, order: Any = None) -> None:
    sent = driver.sent()
    for item in order(sent) if order else sent:
        assert await deliver(h, item) in (200, 202, 204)


async def ends(h: GatewayHarness, job_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """Settle until the prediction is terminal; return it."""

    async def poll() -> dict[str, Any]:
        while True:
            await pump(h)
            prediction = await h.get(job_id)
            if prediction["status"] in TERMINAL:
                return prediction
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout_s)


def readable(error: str | None) -> bool:
    return bool(error) and len(error or "") < 2000 and "Traceback" not in (error or "")


# --- the path without faults ------------------------------------------------------------


async def test_succeeds_by_webhook_or_poll(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.start_job(job)
    driver.finish(job)
    await deliver_all(up, driver)
    done = await ends(up, job_id)
    assert (done["status"], done["output"]) == ("succeeded", driver.expected("hello"))
    assert driver.submits() == 1


async def test_model_failure_is_failed_with_its_message(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.fail(job, "asked to fail: hello")
    await deliver_all(up, driver)
    done = await ends(up, job_id)
    assert done["status"] == "failed" and readable(done["error"])


async def test_no_webhook_url_is_sent_to_a_provider_without_webhooks(
    up: GatewayHarness, driver: Driver
):
    await create(up)
    job = await driver.job()
    assert (job.webhook is not None) is driver.webhooks


# --- webhooks: lost, duplicate, late, out of order, forged, stale, malformed -------------


async def test_lost_webhook(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)  # its webhook never arrives
    done = await ends(up, job_id)
    if driver.recovers_lost:
        assert (done["status"], done["output"]) == ("succeeded", driver.expected("hello"))
    else:  # Cog keeps nothing: the outcome is lost, and said so
        assert done["status"] == "failed" and "no longer knows" in done["error"]


async def test_duplicate_webhooks_count_once(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    await deliver_all(up, driver, order=lambda sent: sent + sent)
    done = await ends(up, job_id)
    assert (done["status"], done["output"]) == ("succeeded", driver.expected("hello"))
    assert driver.submits() == 1


async def test_late_webhook_after_terminal_changes_nothing(up: GatewayHarness, driver: Driver):
    if not driver.recovers_lost:
        pytest.skip("Cog: nothing but the webhook can end the job")
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    first = await ends(up, job_id)  # by polling
    await deliver_all(up, driver)  # then the webhook, late
    await pump(up)
    assert await up.get(job_id) == first


async def test_out_of_order_webhooks(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.start_job(job)
    driver.finish(job)
    await deliver_all(up, driver, order=lambda sent: list(reversed(sent)))
    done = await ends(up, job_id)
    assert (done["status"], done["output"]) == ("succeeded", driver.expected("hello"))


async def test_forged_webhook_is_refused(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    sent = driver.sent()
    if not sent:  # no webhooks at all: whatever comes to the URL is refused
        token = "x" * 43
        sent = [Sent(f"/provider-webhooks/up/{job_id}/{token}", {}, b'{"status":"failed"}')]
    assert await deliver(up, driver.forge(sent[-1])) == 401
    done = await ends(up, job_id)  # the real outcome, by polling (Cog: lost)
    assert done["status"] == ("succeeded" if driver.recovers_lost else "failed")


async def test_stale_signature_is_refused(up: GatewayHarness, driver: Driver):
    await create(up)
    job = await driver.job()
    driver.finish(job)
    sent = driver.sent()
    if not sent:
        pytest.skip("no webhooks")
    assert await deliver(up, driver.stale(sent[-1])) == 401


@pytest.mark.parametrize("body", [b"", b"null", b"{not json", b'{"status": 5, "id": []}'])
async def test_malformed_status_body_fails_readably(up: GatewayHarness, driver: Driver,
                                                    body: bytes):
    if driver.kind == "openai":  # the call's own answer is its status
        driver.fault("submit", 200, body, times=1000, content_type="application/json")
        job_id = await create(up)
    else:
        job_id = await create(up)
        await driver.job()
        driver.fault(driver.status_op(), 200, body, times=1000)
    done = await ends(up, job_id)
    assert done["status"] == "failed" and readable(done["error"])


async def test_ten_megabyte_error_page_fails_readably(up: GatewayHarness, driver: Driver):
    driver.fault("submit", 400, TEN_MB_PAGE, content_type="text/html")
    job_id = await create(up)
    done = await ends(up, job_id)
    assert done["status"] == "failed" and readable(done["error"])
    assert "Bad gateway" in done["error"]


# --- the provider refuses or is away ------------------------------------------------------


async def test_429_burst_with_retry_after_at_submit(up: GatewayHarness, driver: Driver):
    driver.fault("submit", 429, b'{"detail":"slow down"}', times=2, retry_after="0")
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    await deliver_all(up, driver)
    done = await ends(up, job_id)
    assert done["status"] == "succeeded" and driver.submits() == 1


async def test_429_at_submit_defers_by_its_retry_after(up: GatewayHarness, driver: Driver):
    if driver.kind == "openai":
        pytest.skip("openai: the held call itself waits out Retry-After (up to 120 s)")
    driver.fault("submit", 429, b'{"detail":"slow down"}', retry_after="1")
    before = utcnow()
    job_id = await create(up)
    due = await _next_check(up, job_id)
    assert (await up.get(job_id))["status"] == "starting"
    assert due is not None and due >= before + timedelta(seconds=0.9)


async def test_5xx_burst_while_polling_honours_retry_after(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    if driver.status_op() == "submit":
        pytest.skip(f"{driver.kind}: no status call to refuse")
    driver.fault("status", 503, b"upstream busy", times=2, retry_after="1")
    driver.finish(job)
    before = utcnow()
    while driver.server.faults and driver.server.faults[0].times == 2:  # the first 503
        await pump(up)
        await asyncio.sleep(0.01)
    row_due = await _next_check(up, job_id)
    assert row_due is not None and row_due >= before + timedelta(seconds=0.9)
    done = await ends(up, job_id)
    assert done["status"] == "succeeded"


async def test_provider_down_at_submit(up: GatewayHarness, driver: Driver):
    if not driver.wire:
        pytest.skip("the in-memory fake cannot be down")
    await driver.server.down()
    prediction = await up.create({"version": VERSION, "input": {"prompt": "hello"}})
    await pump(up)
    # not submitted yet (an OpenAI-compatible call is held, retrying its connection)
    assert (await up.get(prediction["id"]))["status"] in ("starting", "processing")
    await driver.server.up()
    job = await driver.job()
    driver.finish(job)
    await deliver_all(up, driver)
    done = await ends(up, prediction["id"])
    assert done["status"] == "succeeded" and driver.submits() == 1


# --- results, cancels and deadlines -----------------------------------------------------------


async def test_expired_result_fails(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    driver.expire(job)
    done = await ends(up, job_id)
    assert done["status"] == "failed" and readable(done["error"])


async def test_cancel_in_flight(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.start_job(job)
    await pump(up)
    response = await up.client.post(f"/v1/predictions/{job_id}/cancel", headers=up.headers)
    assert response.status == 200
    await pump(up)
    # the provider sees the cancel in its own time (an OpenAI-compatible server notices
    # the closed connection on its next look at it): wait for it, with a deadline
    await wait_until(lambda: driver.cancels() >= 1, what="the provider saw the cancel")
    await deliver_all(up, driver)
    done = await ends(up, job_id)
    assert done["status"] == "canceled" and done["output"] is None


async def test_cancel_racing_completion_keeps_the_result(up: GatewayHarness, driver: Driver):
    job_id = await create(up)
    job = await driver.job()
    driver.finish(job)
    await asyncio.sleep(0.05)  # let a held call end (not a readiness wait: the race itself)
    await up.client.post(f"/v1/predictions/{job_id}/cancel", headers=up.headers)
    await deliver_all(up, driver)
    done = await ends(up, job_id)
    if driver.recovers_lost or driver.sent():
        assert (done["status"], done["output"]) == ("succeeded", driver.expected("hello"))


async def test_status_stuck_until_the_deadline(up: GatewayHarness, driver: Driver):
    job_id = await create(up, **{"Cancel-After": "5s"})
    await driver.job()
    up.clock.advance(5.0)  # the gateway's clock past the deadline, not 5 s of waiting
    done = await ends(up, job_id, timeout_s=15.0)
    assert done["status"] in {"canceled", "failed"} and readable(done["error"] or "deadline")
    assert (await up.store.get(job_id)).state in (JobState.CANCELED, JobState.FAILED)


async def _next_check(h: GatewayHarness, job_id: str) -> Any:
    import sqlalchemy as sa

    from gateway.store.schema import jobs

    async with h.store.engine.connect() as conn:
        query = sa.select(jobs.c.next_attempt_at).where(jobs.c.id == job_id)
        return (await conn.execute(query)).scalar()


# --- file inputs ----------------------------------------------------------------------------


async def test_a_large_file_input_reaches_the_provider_in_its_form(up: GatewayHarness,
                                                                    driver: Driver):
    data = bytes(range(256)) * 2935  # 1.0 MB as base64: over RunPod's and Replicate's limits
    uri = "data:application/octet-stream;base64," + base64.b64encode(data).decode()
    await up.create({"version": VERSION, "input": {"prompt": "hello", "image": uri}})
    await pump(up)
    job = await driver.job()
    sent = job.input.get("image")
    if driver.kind == "runpod":  # a URL on the gateway, the bytes in owned storage
        assert sent.startswith("https://gateway.test/assets/")
        key = sent.removeprefix("https://gateway.test/assets/")
        assert up.app[keys.STORAGE].path(key).read_bytes() == data
        served = await up.client.get(f"/assets/{key}")  # recorded, so served without a token
        assert served.status == 200 and await served.read() == data
    elif driver.kind == "replicate":  # through its upload endpoint
        assert sent.startswith(f"{driver.server.url}/files/")
        assert driver.server.files[sent.rsplit("/", 1)[1]] == data
    elif driver.kind != "openai":  # the others take data: URIs as they are
        assert sent == uri
