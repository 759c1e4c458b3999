"""SSE events of a prediction: framing as the clients decode it, replay and exact resume
(gateway/stream.py; docs/streaming.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from replicate.stream import EventSource

from contracts.job import Job, JobState
from gateway import stream


def job(state: JobState = JobState.RUNNING, output: Any = None, logs: str | None = None,
        error: str | None = None) -> Job:
    return Job(
        id="p" * 26, state=state, model="o/n", version="hidden", route="o/n", provider="fake",
        input={}, output=output, logs=logs, error=error, created_at=datetime.now(UTC),
        stream=True,
    )


def decode(frames: bytes) -> list[tuple[str, str, str | None]]:
    decoder = EventSource.Decoder()
    found = []
    for line in frames.decode().split("\n"):
        event = decoder.decode(line)
        if event is not None:
            found.append((event.event.value, event.data, event.id))
    return found


def test_python_client_decodes_every_event_with_its_id() -> None:
    events, _ = stream.pending(
        job(JobState.COMPLETED, ["Hello", " wor\nld", {"n": 1}], logs="step 1\n"),
        stream.Cursor(),
    )
    frames = b"".join(e.frame() for e in events)
    assert decode(frames) == [
        ("logs", "step 1\n", "0:7"),
        ("output", "Hello", "1:7"),
        ("output", " wor\nld", "2:7"),
        ("output", '{"n":1}', "3:7"),
        ("done", "{}", "3:7"),
    ]


def test_failed_and_canceled_end_with_done() -> None:
    failed, _ = stream.pending(job(JobState.FAILED, error="boom"), stream.Cursor())
    assert [(e.name, e.data) for e in failed] == [
        ("error", '{"detail": "boom"}'),
        ("done", '{"reason": "error"}'),
    ]
    canceled, _ = stream.pending(job(JobState.CANCELED), stream.Cursor())
    assert [(e.name, e.data) for e in canceled] == [("done", '{"reason": "canceled"}')]


def test_a_plain_output_is_one_event_once_final() -> None:
    assert stream.pending(job(JobState.RUNNING, "partial"), stream.Cursor())[0] == []
    events, _ = stream.pending(job(JobState.COMPLETED, "ALL"), stream.Cursor())
    assert [e.name for e in events] == ["output", "done"]


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.text(max_size=5), max_size=12),
    log_parts=st.lists(st.text(max_size=6), max_size=5),
    cut=st.integers(min_value=0, max_value=20),
)
def test_resuming_from_any_event_id_loses_and_repeats_nothing(
    tokens: list[str], log_parts: list[str], cut: int
) -> None:
    # The job grows step by step; a client reads some events, drops, and resumes.
    seen: list[stream.Event] = []
    cursor = stream.Cursor()
    for step in range(len(tokens) + 1):
        logs = "".join(log_parts[: min(step, len(log_parts))])
        current = job(output=tokens[:step], logs=logs)
        events, _ = stream.pending(current, cursor)
        if step == cut % (len(tokens) + 1) and events:
            events = events[: len(events) // 2]  # the connection drops mid-batch
        seen.extend(events)
        cursor = stream.Cursor.parse(seen[-1].id) if seen else stream.Cursor()
    final = job(JobState.COMPLETED, tokens, "".join(log_parts))
    rest, _ = stream.pending(final, cursor)
    seen.extend(rest)
    assert [e.data for e in seen if e.name == "output"] == tokens
    assert "".join(e.data for e in seen if e.name == "logs") == "".join(log_parts)
    assert seen[-1].name == "done"


def test_foreign_event_ids_restart_from_the_beginning() -> None:
    assert stream.Cursor.parse("12:5") == stream.Cursor(12, 5)
    assert stream.Cursor.parse("1690212292:0") == stream.Cursor()  # Replicate's own form
    assert stream.Cursor.parse("garbage") == stream.Cursor()
    assert stream.Cursor.parse(None) == stream.Cursor()


def test_stream_tokens_are_per_prediction() -> None:
    token = stream.stream_token("whsec_x", "a" * 26)
    assert stream.verify_token("whsec_x", "a" * 26, token)
    assert not stream.verify_token("whsec_x", "b" * 26, token)
    assert not stream.verify_token("whsec_y", "a" * 26, token)
