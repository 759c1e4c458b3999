"""The request path's shortcuts say what the long way says: the ``request`` line written
without a record (``gateway.logs.json_sink``), its timestamps (``iso_time``), and the API
token check that remembers the headers it accepted (``ApiTokens``)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from contracts.errors import Unauthenticated
from contracts.job import JobState
from gateway import logs
from gateway.http import access
from gateway.http.middleware import ApiTokens


@pytest.mark.parametrize(
    "created",
    [0.0, 1.0, 1_700_000_000.0, 1_700_000_000.5, 1_700_000_000.0000005,
     1_700_000_000.9999995, 1_700_000_000.1234565, 2_000_000_000.999999],
)
def test_iso_time_is_isoformat(created: float) -> None:
    assert logs.iso_time(created) == datetime.fromtimestamp(created, UTC).isoformat()


def test_iso_time_is_isoformat_at_random() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        created = rng.uniform(0, 4e9)
        assert logs.iso_time(created) == datetime.fromtimestamp(created, UTC).isoformat()


@pytest.fixture
def configured() -> Iterator[io.StringIO]:
    """``logs.configure`` on a stream of our own (pytest's capturing handlers taken off
    the root logger meanwhile); the root logger restored afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logs.configure("INFO")
    stream = io.StringIO()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        root.handlers[:], root.level = saved


def only_ours() -> None:
    """Drop the handlers pytest added to the root logger for this test's call."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if isinstance(h, logs.LineHandler)]


def test_the_direct_line_is_the_formatted_record(configured: io.StringIO) -> None:
    only_ours()
    log = logging.getLogger("gateway.access")
    sink = logs.json_sink(log, logging.INFO)
    assert isinstance(sink, logs.LineHandler)
    fields = {"method": "GET", "route": "/v1/predictions/{id}", "status": 200,
              "duration_ms": 0.25, "request_id": "abc", "token": None,
              "at": datetime(2026, 1, 2, tzinfo=UTC), "big": 2**70, "state": JobState.QUEUED}
    record = log.makeRecord(log.name, logging.INFO, __file__, 1, "request", (), None,
                            extra=fields)
    formatted = logs.JsonFormatter().format(record)

    async def write() -> None:
        sink.emit_json({"ts": logs.iso_time(record.created), "level": "info",
                        "logger": log.name, "event": "request", **fields})

    asyncio.run(write())  # written at the end of the loop iteration
    assert configured.getvalue() == formatted + "\n"
    assert list(json.loads(formatted)) == ["ts", "level", "logger", "event", *fields]


def test_no_direct_line_when_anything_else_would_see_the_record(
    configured: io.StringIO,
) -> None:
    only_ours()
    log = logging.getLogger("gateway.access")
    assert logs.json_sink(log, logging.INFO) is not None
    assert logs.json_sink(log, logging.DEBUG) is None  # below the level
    other = logging.Handler()
    logging.getLogger("gateway").addHandler(other)  # another handler on the way
    assert logs.json_sink(log, logging.INFO) is None
    logging.getLogger("gateway").removeHandler(other)
    log.addFilter(lambda record: True)
    try:
        assert logs.json_sink(log, logging.INFO) is None  # a filter on the way
    finally:
        log.filters.clear()
    logging.getLogger().handlers[0].setFormatter(logs.TextFormatter())
    assert logs.json_sink(log, logging.INFO) is None  # the text format


@pytest.mark.parametrize(("method", "name", "duration_ms"), [
    ("GET", "billing-app", 0.25), ("POST", None, 0.0), ("GET", 'a "quoted"\\ name\t', 12.345),
    ("PROPFIND", "caf\u00e9 \u2603", 1234567.891), ("GET", "x", 0.001), ("DELETE", "y", 99.999),
])
def test_the_request_line_is_the_formatted_record(
    method: str, name: str | None, duration_ms: float,
) -> None:
    log = logging.getLogger("gateway.access")
    fields = {"method": method, "route": "/v1/predictions/{id}", "status": 200,
              "duration_ms": duration_ms, "request_id": "0123abcd._:-Z", "token": name}
    record = log.makeRecord(log.name, logging.INFO, __file__, 1, "request", (), None,
                            extra=fields)
    assert access._request_line(record.created, method, fields["route"], 200, duration_ms,
                                "0123abcd._:-Z", name) == logs.JsonFormatter().format(record)


def test_the_request_line_of_rounded_durations_at_random() -> None:
    rng = random.Random(11)
    log = logging.getLogger("gateway.access")
    for _ in range(5_000):
        duration_ms = round(rng.uniform(0, 10 ** rng.randint(0, 9)), 3)
        fields = {"method": "GET", "route": "unmatched", "status": 404,
                  "duration_ms": duration_ms, "request_id": "r", "token": None}
        record = log.makeRecord(log.name, logging.INFO, __file__, 1, "request", (), None,
                                extra=fields)
        assert access._request_line(record.created, "GET", "unmatched", 404, duration_ms,
                                    "r", None) == logs.JsonFormatter().format(record)


def test_info_off_the_event_loop_is_written_at_once(configured: io.StringIO) -> None:
    only_ours()
    log = logging.getLogger("gateway.dispatcher")
    assert logs.json_sink(log, logging.INFO) is not None
    logs.info(log, "job_submitted", {"job_id": "abc", "provider": "fake"})  # no loop here
    line = json.loads(configured.getvalue())
    assert (line["event"], line["job_id"], line["provider"]) == ("job_submitted", "abc", "fake")


def test_info_is_a_record_when_something_else_listens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = logging.getLogger("gateway.dispatcher")

    async def write() -> None:
        logs.info(log, "job_submitted", {"job_id": "abc", "provider": "fake"})

    asyncio.run(write())
    (record,) = [r for r in caplog.records if r.getMessage() == "job_submitted"]
    assert (record.job_id, record.provider) == ("abc", "fake")  # type: ignore[attr-defined]
    assert record.filename == "test_front.py"  # the caller's line, not gateway/logs.py


def test_api_tokens_remember_only_what_they_accepted() -> None:
    tokens = ApiTokens({"app": "r8_a", "other": "r8_b"})
    assert tokens.name_of("Bearer r8_a") == "app"
    assert tokens.name_of("Bearer r8_a") == "app"  # remembered
    assert tokens.name_of("Token r8_b") == "other"  # the legacy scheme
    for refused in (None, "", "Bearer", "Bearer r8_c", "Basic r8_a", "Bearer r8_a2"):
        with pytest.raises(Unauthenticated):
            tokens.name_of(refused)
    with pytest.raises(Unauthenticated):
        tokens.name_of("Bearer r8_c")  # refused again: never remembered
    for n in range(ApiTokens.MAX_REMEMBERED * 2):  # header variants of one token
        assert tokens.name_of("Bearer " + " " * n + "r8_a") == "app"
    assert len(tokens._passed) == ApiTokens.MAX_REMEMBERED  # bounded


def test_api_tokens_from_a_plain_list() -> None:
    assert ApiTokens(["r8_x", "r8_y"]).name_of("bearer r8_y") == "token-2"
