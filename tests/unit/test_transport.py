"""The shared HTTP boundary (adapters/transport.py) and the OpenAI input table."""

from __future__ import annotations

import httpx
import pytest

from adapters import openai_mapping, transport
from contracts.errors import ProviderBusy, UpstreamRejected, UpstreamRetryable, UpstreamUnreachable


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("3", 3.0), ("0.5", 0.5), (None, None), ("soon", None), ("-4", 0.0), ("nan", None)],
)
def test_retry_after(value, seconds):
    assert transport.parse_retry_after(value) == seconds


def test_retry_after_as_an_http_date():
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert transport.parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now) == 30.0


def test_rate_limiter_never_sleeps_and_says_when():
    clock = [0.0]
    limiter = transport.RateLimiter(2.0, burst=1, clock=lambda: clock[0])
    limiter.take("p")
    with pytest.raises(ProviderBusy) as busy:
        limiter.take("p")
    assert busy.value.retry_after_s == pytest.approx(0.5)
    clock[0] = 0.5
    limiter.take("p")


def _upstream(handler) -> transport.Upstream:  # type: ignore[no-untyped-def]
    return transport.Upstream(name="p", base_url="http://p.test",
                              transport=httpx.MockTransport(handler))


async def test_statuses_map_to_the_error_tree():
    answers = {429: ProviderBusy, 503: UpstreamRetryable, 408: UpstreamRetryable,
               422: UpstreamRejected}
    for code, error in answers.items():
        up = _upstream(lambda r, c=code: httpx.Response(c, text="x" * 10_000,
                                                        headers={"Retry-After": "7"}))
        response = await up.call("op", "GET", "/")
        with pytest.raises(error) as caught:
            up.raise_for_status("op", response)
        assert len(caught.value.detail) < 300
        await up.aclose()


async def test_a_create_that_breaks_after_sending_is_not_retryable():
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    up = _upstream(broken)
    with pytest.raises(UpstreamRejected, match="not retried"):
        await up.call("create", "POST", "/", idempotent=False)
    with pytest.raises(UpstreamRetryable):
        await up.call("get", "GET", "/")
    await up.aclose()


async def test_a_refused_connection_is_retryable_even_for_a_create():
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    up = _upstream(refused)
    with pytest.raises(UpstreamUnreachable):  # nothing was sent: not "maybe submitted"
        await up.call("create", "POST", "/", idempotent=False)
    await up.aclose()


def test_openai_request_body_is_the_mapped_input_with_model_and_stream():
    """The input table itself is the default map's (tests/unit/test_openai_default_map.py);
    the adapter adds only the model and, for a streamed call, ``stream``."""
    mapped = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    assert openai_mapping.build_request("m", mapped, stream=True) == {
        "model": "m", **mapped, "stream": True}
    assert openai_mapping.build_request("m", mapped, stream=False) == {"model": "m", **mapped}
