"""Server-sent events for ``urls.stream`` (docs/replicate-api.md §7; docs/streaming.md).

The events of a prediction are a pure function of its stored state: each item of a list
``output`` is one ``output`` event, in order (Cog's iterator outputs arrive item by item
through its ``output`` webhooks and are stored as the list so far); new ``logs`` text is
one ``logs`` event; a finished prediction ends with ``error`` (when it failed) and
``done``. So a stream can be replayed from the store at any time, and a reconnect needs
no per-connection memory: every event's ``id`` is the position *after* it, ``<outputs
sent>:<log characters sent>``, and a ``Last-Event-ID`` resumes exactly there, without a
gap and without a repeat. A malformed or foreign one replays from the start (never a 400,
which would end an ``EventSource`` for good; docs/streaming.md 'A Last-Event-ID the
gateway did not issue').

Framing follows §7.4: every event has ``event:`` and ``id:``; each line of the data is its
own ``data: `` line (a leading space of the text survives); whole events are written at
once; ``: keepalive`` comments keep idle connections under the Python client's 30 s read
timeout.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from contracts.auth import same_secret
from contracts.job import Job, JobState
from gateway.clock import SYSTEM_CLOCK, Clock

__all__ = [
    "KEEPALIVE",
    "Cursor",
    "Event",
    "follow",
    "pending",
    "stream_token",
    "verify_token",
]

KEEPALIVE = b": keepalive\n\n"
_CURSOR_RE = re.compile(r"^(\d{1,9}):(\d{1,12})$")
_TOKEN_CHARS = 32


@dataclass(frozen=True)
class Cursor:
    """How much of a prediction's stream a client has: output items and log characters."""

    outputs: int = 0
    log_chars: int = 0

    @property
    def id(self) -> str:
        """The SSE ``id`` of the event that ends at this position."""
        return f"{self.outputs}:{self.log_chars}"

    @classmethod
    def parse(cls, value: str | None) -> Cursor:
        """The position in a ``Last-Event-ID``; the start for a missing, empty or foreign
        one (:meth:`is_foreign` tells the last apart; docs/streaming.md 'A Last-Event-ID
        the gateway did not issue')."""
        match = _CURSOR_RE.match((value or "").strip())
        if match is None:
            return cls()
        return cls(int(match.group(1)), int(match.group(2)))

    @staticmethod
    def is_foreign(value: str | None) -> bool:
        """A ``Last-Event-ID`` that is there, not empty, and not an id this gateway issues
        (garbage, Replicate's own ids): the stream replays from its start."""
        text = (value or "").strip()
        return bool(text) and _CURSOR_RE.match(text) is None


@dataclass(frozen=True)
class Event:
    """One server-sent event."""

    name: str
    data: str
    id: str

    def frame(self) -> bytes:
        """The event as written on the wire, ending with its blank line."""
        text = self.data.replace("\r\n", "\n").replace("\r", "\n")
        lines = "".join(f"data: {line}\n" for line in text.split("\n"))
        return f"event: {self.name}\nid: {self.id}\n{lines}\n".encode()


def pending(job: Job, cursor: Cursor) -> tuple[list[Event], Cursor]:
    """The events of ``job`` after ``cursor``, and the position after the last of them.

    When the job is terminal the list ends with ``done`` (after ``error`` for a failed
    job); the caller then closes the stream.
    """
    events: list[Event] = []
    logs = job.logs or ""
    if len(logs) > cursor.log_chars:
        new_logs = logs[cursor.log_chars :]
        cursor = Cursor(cursor.outputs, len(logs))
        events.append(Event("logs", new_logs, cursor.id))
    for item in _items(job)[cursor.outputs :]:
        cursor = Cursor(cursor.outputs + 1, cursor.log_chars)
        events.append(Event("output", _text(item), cursor.id))
    if job.state.terminal:
        events.extend(_ending(job, cursor))
    return events, cursor


def _items(job: Job) -> list[Any]:
    """The output as a list of stream items: a list is its items; any other output is
    one item, once the job has succeeded (it is not final before)."""
    if isinstance(job.output, list):
        return job.output
    if job.output is not None and job.state is JobState.COMPLETED:
        return [job.output]
    return []


def _text(item: Any) -> str:
    return item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))


def _ending(job: Job, cursor: Cursor) -> list[Event]:
    if job.state is JobState.COMPLETED:
        return [Event("done", "{}", cursor.id)]
    if job.state is JobState.CANCELED:
        return [Event("done", json.dumps({"reason": "canceled"}), cursor.id)]
    detail = job.error or "the prediction failed"
    return [
        Event("error", json.dumps({"detail": detail}), cursor.id),
        Event("done", json.dumps({"reason": "error"}), cursor.id),
    ]


def stream_token(secret: str, job_id: str) -> str:
    """The capability in a prediction's ``urls.stream`` (the JS client sends no token,
    §7.3): an HMAC-SHA256 of the id under the gateway's secret, 32 hex digits."""
    mac = hmac.new(secret.encode(), f"stream:{job_id}".encode(), hashlib.sha256)
    return mac.hexdigest()[:_TOKEN_CHARS]


def verify_token(secret: str, job_id: str, token: str) -> bool:
    """Whether ``token`` is the stream capability of ``job_id`` (constant-time)."""
    return same_secret(token, stream_token(secret, job_id))


async def follow(
    job: Job,
    cursor: Cursor,
    *,
    wait: Callable[[str, float], Awaitable[tuple[bool, Job | None]]],
    read: Callable[[str], Awaitable[Job]],
    poll_s: float,
    keepalive_s: float,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[bytes]:
    """The stream of ``job`` from ``cursor``: frames until ``done``, keepalives between.

    ``wait`` is :meth:`gateway.notify.Notifier.wait_job` (a change made in this process
    arrives at once, with the job); without a wake-up the store is read (``read``) every
    ``poll_s`` seconds, which sees changes made by other gateway processes. A keepalive
    goes out after ``keepalive_s`` quiet seconds of ``clock.monotonic()``.
    """
    quiet_since = clock.monotonic()
    while True:
        events, cursor = pending(job, cursor)
        if events:
            yield b"".join(event.frame() for event in events)
            quiet_since = clock.monotonic()
        if job.state.terminal:
            return
        woken, changed = await wait(job.id, poll_s)
        job = changed if woken and changed is not None else await read(job.id)
        if clock.monotonic() - quiet_since >= keepalive_s:
            yield KEEPALIVE
            quiet_since = clock.monotonic()
