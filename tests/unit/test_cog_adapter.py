"""CogAdapter against httpx.MockTransport: wire shapes, error mapping, webhooks, probe."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters import cog, port
from contracts.errors import (
    ContractViolation,
    ProviderBusy,
    UpstreamRejected,
    UpstreamRetryable,
    UpstreamUnreachable,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.snapshot import ProviderRef, SubmitRequest

BASE = "http://cog.test:5000"
JOB = "p1x2y3"
INPUT = {"prompt": "hi", "steps": 2}
HOOK = "https://gw.test/hooks/cog/p1x2y3?token=t0k"
FRESH = {"id": JOB, "status": "starting"}
IN_FLIGHT = {"id": JOB, "input": INPUT, "logs": "step 1/2\n", "metrics": {}, "status": "processing"}

Handler = Callable[[httpx.Request], httpx.Response]


class Upstream:
    """A scripted Cog: answers from a list, records every request."""

    def __init__(self, *responses: httpx.Response | Exception) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.responses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def body(self, index: int) -> dict[str, Any]:
        return json.loads(self.requests[index].content)


def reply(status: int, payload: Any = None) -> httpx.Response:
    return httpx.Response(status, json=payload if payload is not None else {})


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., cog.CogAdapter]]:
    adapters: list[cog.CogAdapter] = []

    def build(upstream: Handler, **kwargs: Any) -> cog.CogAdapter:
        adapter = cog.CogAdapter(
            name="local-cog", base_url=BASE + "/", transport=httpx.MockTransport(upstream),
            **kwargs,
        )
        adapters.append(adapter)
        return adapter

    yield build
    for adapter in adapters:
        await adapter.aclose()


def submit_request(webhook: str | None = HOOK) -> SubmitRequest:
    return SubmitRequest(
        job_id=JOB, input=INPUT, webhook_url=webhook, model="acme/echo", version="hidden"
    )


REF = ProviderRef(job_id=JOB, provider_job_id=JOB, input=INPUT, webhook_url=HOOK)


# --- construction --------------------------------------------------------------------------


async def test_adapter_satisfies_the_port_and_advertises_webhooks_fetch_cancel(make):
    adapter = make(Upstream(), fetch_interval_s=45.0, fetch_max_interval_s=300.0)
    assert isinstance(adapter, port.Adapter)
    caps = adapter.capabilities
    assert (caps.webhooks, caps.fetch, caps.cancel) == (True, True, True)
    assert (caps.fetch_interval_s, caps.fetch_max_interval_s) == (45.0, 300.0)


# --- submit --------------------------------------------------------------------------------


async def test_submit_puts_the_job_id_async_with_a_filter_that_has_completed(make):
    upstream = Upstream(reply(202, FRESH))
    await make(upstream).submit(submit_request())
    (request,) = upstream.requests
    assert request.method == "PUT"
    assert str(request.url) == f"{BASE}/predictions/{JOB}"
    assert request.headers["prefer"] == "respond-async"
    assert request.headers["content-type"] == "application/json"
    assert upstream.body(0) == {
        "id": JOB,
        "input": INPUT,
        "webhook": HOOK,
        "webhook_events_filter": ["start", "output", "logs", "completed"],
    }


async def test_submit_without_webhook_sends_neither_webhook_nor_filter(make):
    upstream = Upstream(reply(202, FRESH))
    await make(upstream).submit(submit_request(webhook=None))
    assert upstream.body(0) == {"id": JOB, "input": INPUT}


async def test_submit_202_starting_is_a_queued_snapshot(make):
    snapshot = await make(Upstream(reply(202, FRESH))).submit(submit_request())
    assert snapshot.provider_job_id == JOB
    assert snapshot.state is JobState.QUEUED
    assert snapshot.raw_status == "starting"
    assert not snapshot.lost


async def test_submit_retried_while_in_flight_returns_the_running_snapshot(make):
    snapshot = await make(Upstream(reply(202, IN_FLIGHT))).submit(submit_request())
    assert snapshot.state is JobState.RUNNING
    assert snapshot.logs == "step 1/2\n"


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (409, {"error": "At capacity - all prediction slots busy", "status": "failed"}),
        (503, {"error": "Setup has not finished yet", "status": "failed"}),
        (429, {"error": "too many"}),
    ],
)
async def test_submit_409_503_429_raise_provider_busy(make, status, payload):
    with pytest.raises(ProviderBusy) as caught:
        await make(Upstream(reply(status, payload))).submit(submit_request())
    assert str(status) in caught.value.detail
    assert payload["error"] in caught.value.detail


async def test_submit_422_is_rejected_with_cogs_field_messages(make):
    detail = [
        {"loc": ["body", "input", "steps"], "msg": "value is not a valid integer", "type": "x"},
        {"loc": ["body", "id"], "msg": "prediction ID must match", "type": "value_error"},
    ]
    with pytest.raises(UpstreamRejected) as caught:
        await make(Upstream(reply(422, {"detail": detail}))).submit(submit_request())
    assert "input.steps: value is not a valid integer" in caught.value.detail
    assert "id: prediction ID must match" in caught.value.detail


async def test_submit_422_with_an_unexpected_body_still_says_what_came_back(make):
    upstream = Upstream(httpx.Response(422, text="nope, not JSON"))
    with pytest.raises(UpstreamRejected, match="nope, not JSON"):
        await make(upstream).submit(submit_request())


@pytest.mark.parametrize("status", [400, 404, 405, 415])
async def test_submit_other_4xx_are_rejected(make, status):
    with pytest.raises(UpstreamRejected, match=str(status)):
        await make(Upstream(httpx.Response(status, text="bad"))).submit(submit_request())


@pytest.mark.parametrize("status", [500, 502, 504])
async def test_submit_5xx_are_retryable_but_not_busy(make, status):
    with pytest.raises(UpstreamRetryable) as caught:
        await make(Upstream(httpx.Response(status, text="oops"))).submit(submit_request())
    assert not isinstance(caught.value, ProviderBusy)


async def test_submit_connection_error_is_retryable_and_chained(make):
    error = httpx.ConnectError("connection refused")
    with pytest.raises(UpstreamUnreachable) as caught:  # nothing sent: not maybe submitted
        await make(Upstream(error)).submit(submit_request())
    assert caught.value.__cause__ is error
    assert "ConnectError" in caught.value.detail


async def test_submit_timeout_is_retryable_and_names_the_timeout(make):
    error = httpx.ReadTimeout("timed out")
    with pytest.raises(UpstreamRetryable, match=r"timed out after 7\.5 s") as caught:
        await make(Upstream(error), request_timeout_s=7.5).submit(submit_request())
    assert caught.value.__cause__ is error
    assert not isinstance(caught.value, UpstreamUnreachable)  # it may have been sent


async def test_submit_2xx_with_a_body_that_is_not_a_prediction_is_retryable(make):
    upstream = Upstream(httpx.Response(202, text="<html>proxy</html>"))
    with pytest.raises(UpstreamRetryable, match="not a prediction"):
        await make(upstream).submit(submit_request())


# --- status mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("starting", JobState.QUEUED),
        ("processing", JobState.RUNNING),
        ("succeeded", JobState.COMPLETED),
        ("failed", JobState.FAILED),
        ("canceled", JobState.CANCELED),
        ("aborted", JobState.RUNNING),
        ("", JobState.RUNNING),
    ],
)
def test_map_status_known_words_and_unknown_ones_as_running(raw, state):
    assert cog.map_status(raw) is state


@given(st.text())
def test_only_the_three_known_terminal_words_map_to_a_terminal_state(raw):
    assert cog.map_status(raw).terminal == (raw in {"succeeded", "failed", "canceled"})


# --- cancel --------------------------------------------------------------------------------


async def test_cancel_200_is_requested(make):
    upstream = Upstream(reply(200))
    assert await make(upstream).cancel(REF) is True
    (request,) = upstream.requests
    assert (request.method, request.url.path) == ("POST", f"/predictions/{JOB}/cancel")


async def test_cancel_404_means_unknown_or_finished(make):
    assert await make(Upstream(reply(404))).cancel(REF) is False


async def test_cancel_5xx_and_connection_errors_are_retryable(make):
    with pytest.raises(UpstreamRetryable):
        await make(Upstream(httpx.Response(500))).cancel(REF)
    with pytest.raises(UpstreamRetryable):
        await make(Upstream(httpx.ConnectError("down"))).cancel(REF)


# --- fetch: the watchdog probe -------------------------------------------------------------


async def test_fetch_probe_puts_the_same_id_with_the_probe_input_and_no_webhook(make):
    upstream = Upstream(reply(202, IN_FLIGHT))
    await make(upstream).fetch(REF)
    (request,) = upstream.requests
    assert (request.method, request.url.path) == ("PUT", f"/predictions/{JOB}")
    assert request.headers["prefer"] == "respond-async"
    assert upstream.body(0) == {"id": JOB, "input": cog.PROBE_INPUT}
    assert not isinstance(cog.PROBE_INPUT, dict)  # Cog must refuse it as a new input


async def test_fetch_in_flight_processing_snapshot_maps_normally(make):
    upstream = Upstream(reply(202, IN_FLIGHT))
    snapshot = await make(upstream).fetch(REF)
    assert (snapshot.state, snapshot.lost, snapshot.logs) == (JobState.RUNNING, False, "step 1/2\n")
    assert len(upstream.requests) == 1  # nothing canceled


async def test_fetch_in_flight_starting_snapshot_with_input_is_queued_not_lost(make):
    upstream = Upstream(reply(202, {**IN_FLIGHT, "status": "starting", "logs": ""}))
    snapshot = await make(upstream).fetch(REF)
    assert (snapshot.state, snapshot.lost) == (JobState.QUEUED, False)
    assert len(upstream.requests) == 1


async def test_fetch_terminal_snapshot_is_returned_as_is(make):
    body = {**IN_FLIGHT, "status": "succeeded", "output": "HI", "metrics": {"predict_time": 0.5}}
    snapshot = await make(Upstream(reply(202, body))).fetch(REF)
    assert (snapshot.state, snapshot.output, snapshot.metrics) == (
        JobState.COMPLETED, "HI", {"predict_time": 0.5}
    )


def assert_lost(snapshot):
    assert (snapshot.provider_job_id, snapshot.state, snapshot.raw_status) == (
        JOB, JobState.FAILED, "lost"
    )
    assert snapshot.lost
    assert snapshot.error == cog.LOST_ERROR


async def test_fetch_202_that_created_a_prediction_reports_lost_and_cancels_the_stray(make):
    upstream = Upstream(reply(202, FRESH), reply(200))
    assert_lost(await make(upstream).fetch(REF))
    cancel = upstream.requests[1]
    assert (cancel.method, cancel.url.path) == ("POST", f"/predictions/{JOB}/cancel")


async def test_fetch_reports_lost_even_when_the_safety_cancel_fails(make):
    upstream = Upstream(reply(202, FRESH), httpx.ConnectError("gone"))
    assert_lost(await make(upstream).fetch(REF))


async def test_fetch_seeing_another_probes_stray_reports_lost(make):
    stray = {**IN_FLIGHT, "input": cog.PROBE_INPUT, "logs": ""}
    upstream = Upstream(reply(202, stray), reply(404))
    assert_lost(await make(upstream).fetch(REF))


async def test_fetch_422_refusing_the_probe_input_means_forgotten_on_a_schema_image(make):
    detail = [{"loc": ["body", "input", "__root__"], "msg": "not of type object"}]
    upstream = Upstream(reply(422, {"detail": detail}))
    assert_lost(await make(upstream).fetch(REF))
    assert len(upstream.requests) == 1  # nothing was created, nothing to cancel


async def test_fetch_409_means_another_prediction_holds_the_slot_and_ours_is_lost(make):
    upstream = Upstream(reply(409, {"error": "At capacity - all prediction slots busy"}))
    assert_lost(await make(upstream).fetch(REF))
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (reply(503, {"error": "Setup has not finished yet"}), ProviderBusy),
        (httpx.Response(500), UpstreamRetryable),
        (httpx.ReadTimeout("slow"), UpstreamRetryable),
        (reply(422, {"detail": [{"loc": ["body", "id"], "msg": "mismatch"}]}), UpstreamRejected),
        (httpx.Response(422, text="not json"), UpstreamRejected),
    ],
)
async def test_fetch_errors_map_like_submit(make, answer, error):
    with pytest.raises(error):
        await make(Upstream(answer)).fetch(REF)


# --- webhooks ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Authorization", "authorization", "AUTHORIZATION"])
async def test_verify_accepts_the_configured_bearer_in_any_header_case(make, name):
    adapter = make(Upstream(), webhook_auth_token="s3cret")
    await adapter.verify_webhook({name: "Bearer s3cret"}, b"{}")


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer s3cret-and-more"},
        {"Authorization": "Basic s3cret"},
        {"Authorization": "s3cret"},
        {"Authorization": "Bearer sécret"},
    ],
)
async def test_verify_rejects_missing_or_wrong_bearer(make, headers):
    adapter = make(Upstream(), webhook_auth_token="s3cret")
    with pytest.raises(WebhookVerificationError) as caught:
        await adapter.verify_webhook(headers, b"{}")
    assert "s3cret" not in caught.value.detail


async def test_verify_without_a_configured_token_accepts_anything(make):
    adapter = make(Upstream())
    await adapter.verify_webhook({}, b"{}")
    await adapter.verify_webhook({"Authorization": "Bearer whatever"}, b"{}")


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("starting", JobState.QUEUED),
        ("processing", JobState.RUNNING),
        ("succeeded", JobState.COMPLETED),
        ("failed", JobState.FAILED),
        ("canceled", JobState.CANCELED),
        ("paused", JobState.RUNNING),
    ],
)
async def test_parse_webhook_maps_every_status_and_keeps_the_raw_one(make, status, state):
    body = json.dumps({"id": JOB, "status": status, "logs": "", "metrics": {}}).encode()
    snapshot = make(Upstream()).parse_webhook(body)
    assert (snapshot.provider_job_id, snapshot.state, snapshot.raw_status) == (JOB, state, status)


async def test_parse_webhook_keeps_the_intermediate_output_array_as_partial(make):
    body = {"id": JOB, "status": "processing", "output": ["HELLO"], "logs": "", "metrics": {}}
    snapshot = make(Upstream()).parse_webhook(json.dumps(body).encode())
    assert snapshot.output == ["HELLO"]
    assert not snapshot.state.terminal


async def test_parse_webhook_reads_a_terminal_event_fully_and_ignores_extra_keys(make):
    body = {
        "id": JOB, "status": "failed", "logs": "step 1/1\n", "output": None,
        "error": "Prediction failed: Prediction failed: ValueError: asked to fail: x",
        "metrics": {"predict_time": 0.003}, "something_new": [1, 2],
    }
    snapshot = make(Upstream()).parse_webhook(json.dumps(body).encode())
    assert snapshot.state is JobState.FAILED
    assert snapshot.error == "ValueError: asked to fail: x"  # Cog's prefixes dropped
    assert snapshot.logs == "step 1/1\n"
    assert snapshot.metrics == {"predict_time": 0.003}


async def test_parse_webhook_null_metrics_become_empty(make):
    body = json.dumps({"id": JOB, "status": "processing", "metrics": None}).encode()
    assert make(Upstream()).parse_webhook(body).metrics == {}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{not json",
        b"[]",
        b'"processing"',
        b'{"status": "processing"}',
        b'{"id": "p1"}',
        b'{"id": "", "status": "processing"}',
        b'{"id": 12, "status": "processing"}',
        b'{"id": "p1", "status": null}',
        b'{"id": "p1", "status": "processing", "logs": 5}',
        b"\xff\xfe",
    ],
)
async def test_parse_webhook_malformed_bodies_are_contract_violations(make, body):
    with pytest.raises(ContractViolation):
        make(Upstream()).parse_webhook(body)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
_cogish = st.fixed_dictionaries(
    {},
    optional={
        "id": _json | st.text(min_size=1),
        "status": _json | st.sampled_from(["starting", "processing", "succeeded", "failed"]),
        "output": _json,
        "logs": _json | st.text(),
        "error": _json,
        "metrics": _json | st.dictionaries(st.text(), _json),
        "input": _json,
    },
)


@given(st.one_of(_json, _cogish).map(lambda value: json.dumps(value).encode()) | st.binary())
async def test_parse_webhook_of_any_body_returns_a_snapshot_or_raises_contract_violation(body):
    adapter = cog.CogAdapter(name="prop", base_url=BASE, transport=httpx.MockTransport(Upstream()))
    try:
        snapshot = adapter.parse_webhook(body)
    except ContractViolation:
        return
    finally:
        await adapter.aclose()
    decoded = json.loads(body)
    assert snapshot.provider_job_id == decoded["id"]
    assert snapshot.raw_status == decoded["status"]
    assert snapshot.state is cog.map_status(decoded["status"])


# --- restart detection -----------------------------------------------------------------------

SUBMITTED = REF.model_copy(update={"submitted_at": datetime(2026, 11, 29, 16, 0, tzinfo=UTC)})


def health(started_at: str) -> httpx.Response:
    return reply(200, {"status": "READY", "setup": {"started_at": started_at}})


@pytest.mark.parametrize(
    ("started_at", "restarted"),
    [
        ("2026-11-29T16:05:00.123456789+00:00", True),  # set up again after the submit
        ("2026-11-29T15:55:00.987654321+00:00", False),  # the same server as at submit
        ("not a time", False),
    ],
)
async def test_a_lost_probe_tells_whether_cog_restarted_since_the_submit(
    make, started_at: str, restarted: bool
):
    upstream = Upstream(reply(409, {"error": "At capacity"}), health(started_at))
    snapshot = await make(upstream).fetch(SUBMITTED)
    assert snapshot.lost and snapshot.provider_restarted is restarted
    assert snapshot.error == (cog.RESTART_ERROR if restarted else cog.LOST_ERROR)
    assert upstream.requests[1].url.path == "/health-check"


async def test_without_a_submission_time_no_restart_is_claimed(make):
    upstream = Upstream(reply(409, {"error": "At capacity"}))
    snapshot = await make(upstream).fetch(REF)
    assert snapshot.lost and not snapshot.provider_restarted
    assert len(upstream.requests) == 1


async def test_an_unreachable_health_check_claims_no_restart(make):
    upstream = Upstream(reply(409, {"error": "At capacity"}), httpx.ConnectError("down"))
    snapshot = await make(upstream).fetch(SUBMITTED)
    assert snapshot.lost and not snapshot.provider_restarted
