"""A prediction's event stream resumed with a ``Last-Event-ID`` the gateway did not issue
(gateway/http/streams.py; docs/streaming.md, the section of that name).

The SSE spec leaves what a server does with the id to the server, and a browser's
``EventSource`` gives up for good on an answer other than a 200 ``text/event-stream``: a
400 would end the stream of a client reconnecting with an id from elsewhere (Replicate's
own ids, a proxy's). So a malformed or foreign id replays the stream from its first
event, as documented, and says so in the log (``stream_resumed_from_start``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import VERSION, GatewayHarness


async def _finished(gateway: GatewayHarness) -> str:
    created = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await gateway.deliver(created["id"], JobState.COMPLETED, output=["a", "b", "c"])
    await gateway.wait_for(created["id"], "succeeded")
    return str(created["urls"]["stream"]).removeprefix("https://gateway.test")


async def _events(gateway: GatewayHarness, url: str, **headers: str) -> list[tuple[str, str]]:
    response = await gateway.client.get(url, headers=headers)
    assert response.status == 200, await response.text()
    assert response.content_type == "text/event-stream"
    events = []
    for block in (await response.text()).split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], fields.get("data", "")))
    return events


@pytest.mark.parametrize("last_event_id", ["garbage", "1690212292:0", "1:", "-1:0", "x" * 500])
async def test_a_malformed_or_foreign_last_event_id_replays_from_the_start_and_logs_it(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture, last_event_id: str,
) -> None:
    url = await _finished(gateway)
    whole = await _events(gateway, url)
    assert [name for name, _ in whole] == ["output", "output", "output", "done"]
    caplog.set_level(logging.INFO, logger="gateway")
    assert await _events(gateway, url, **{"Last-Event-ID": last_event_id}) == whole
    said: list[Any] = [r for r in caplog.records if r.getMessage() == "stream_resumed_from_start"]
    assert len(said) == 1, caplog.records
    assert said[0].last_event_id == last_event_id[:64]


@pytest.mark.parametrize("last_event_id", ["", "  "])
async def test_an_empty_last_event_id_is_a_fresh_start_without_a_word(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture, last_event_id: str,
) -> None:
    """An SSE client that was sent an empty ``id:`` sends an empty one back: no id."""
    url = await _finished(gateway)
    whole = await _events(gateway, url)
    caplog.set_level(logging.INFO, logger="gateway")
    assert await _events(gateway, url, **{"Last-Event-ID": last_event_id}) == whole
    assert not [r for r in caplog.records if r.getMessage() == "stream_resumed_from_start"]


async def test_an_id_the_gateway_issued_resumes_after_it(
    gateway: GatewayHarness, caplog: pytest.LogCaptureFixture,
) -> None:
    url = await _finished(gateway)
    caplog.set_level(logging.INFO, logger="gateway")
    assert await _events(gateway, url, **{"Last-Event-ID": "1:0"}) == [
        ("output", "b"), ("output", "c"), ("done", "{}"),
    ]
    assert not [r for r in caplog.records if r.getMessage() == "stream_resumed_from_start"]
