"""Structured logs: one JSON object a line, a stable ``event`` plus its context.

Callers log ``log.info("job_submitted", extra={"job_id": ..., "provider": ...})``; the
message is the event name. Secrets, signatures and payloads are never passed in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

__all__ = [
    "JsonFormatter", "LineHandler", "TextFormatter", "client_errors", "configure", "info",
    "iso_time", "json_sink",
]

# datetimes and dataclasses as ``str()`` makes them, as json.dumps(default=str) did
_AS_JSON_DID = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_last_second = (-1.0, "")  # the last whole second iso_time wrote, and its text


def iso_time(created: float) -> str:
    """``datetime.fromtimestamp(created, UTC).isoformat()`` (``2026-11-30T17:41:15.123456
    +00:00``, microseconds rounded half to even, left out when zero), with the text of the
    whole second made once per second: every line carries one."""
    global _last_second  # one tuple, replaced whole: safe across threads
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    second = _last_second
    if whole != second[0]:
        second = _last_second = (whole, datetime.fromtimestamp(whole, UTC).isoformat()[:-6])
    return f"{second[1]}.{micros:06d}+00:00" if micros else f"{second[1]}+00:00"


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts", "level", "logger", "event", ...context}``."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        data.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        try:  # orjson: a few microseconds a line (every request logs one)
            return orjson.dumps(data, default=str, option=_AS_JSON_DID).decode()
        except TypeError:  # what orjson refuses (an integer beyond 64 bits, a str subclass key)
            return json.dumps(data, default=str)


class TextFormatter(JsonFormatter):
    """``<ts> <level> <logger> <event> key=value ...``: the same fields, for people."""

    def format(self, record: logging.LogRecord) -> str:
        data = json.loads(super().format(record))
        head = [data.pop(k) for k in ("ts", "level", "logger", "event")]
        exception = data.pop("exception", None)
        tail = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in data.items())
        line = " ".join(str(part) for part in [*head, tail] if part != "")
        return f"{line}\n{exception}" if exception else line


class LineHandler(logging.StreamHandler):
    """A stream handler that writes the lines of one event-loop iteration together.

    On the event loop thread a line is kept and written (with the others of the same
    iteration, in one write and one flush) by a callback the loop runs at the end of
    the iteration; elsewhere (worker threads, no loop) each line is written at once.
    Every request logs a line, and a write system call each was a sixth of a GET's cost
    (docs/benchmarks.md).
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the last one running here
        self._loop_thread = 0

    def _running_loop(self) -> asyncio.AbstractEventLoop | None:
        """This thread's running event loop, or None. Remembered: in Python 3.11 every
        ``asyncio.get_running_loop()`` is a ``getpid`` system call."""
        loop = self._loop
        if (loop is not None and self._loop_thread == threading.get_ident()
                and loop.is_running()):
            return loop
        loop = asyncio._get_running_loop()
        if loop is not None:
            self._loop, self._loop_thread = loop, threading.get_ident()
        return loop

    def emit(self, record: logging.LogRecord) -> None:
        loop = self._running_loop()
        if loop is None:
            self._flush_lines()
            super().emit(record)
            return
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 (logging's own convention)
            self.handleError(record)
            return
        if not self._lines:
            loop.call_soon(self._flush_lines)
        self._lines.append(line)

    def emit_json(self, data: dict[str, Any]) -> bool:
        """Write ``data`` as one line, as :meth:`emit` writes a record's fields, without a
        record (see :func:`json_sink`); False, writing nothing, off the event loop
        thread."""
        loop = self._running_loop()
        if loop is None:
            return False
        try:  # as JsonFormatter.format writes the same fields
            line = orjson.dumps(data, default=str, option=_AS_JSON_DID).decode()
        except TypeError:
            line = json.dumps(data, default=str)
        if not self._lines:
            loop.call_soon(self._flush_lines)
        self._lines.append(line)
        return True

    def emit_line(self, line: str) -> bool:
        """Write ``line`` (one JSON object, made as :class:`JsonFormatter` would make it
        from a record's fields) as :meth:`emit_json` writes its line; False, writing
        nothing, off the event loop thread."""
        loop = self._running_loop()
        if loop is None:
            return False
        if not self._lines:
            loop.call_soon(self._flush_lines)
        self._lines.append(line)
        return True

    def _flush_lines(self) -> None:
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        with self.lock:  # type: ignore[union-attr]
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream at exit: nothing to do
                return

    def flush(self) -> None:
        """Write the lines kept so far, then flush the stream (at exit, ``logging``
        flushes every handler)."""
        self._flush_lines()
        super().flush()

    def close(self) -> None:
        self._flush_lines()
        super().close()


def json_sink(logger: logging.Logger, level: int) -> LineHandler | None:
    """The :class:`LineHandler` that alone would write ``logger``'s records at ``level``
    with a :class:`JsonFormatter`, as :func:`configure` sets logging up; None otherwise
    (the level is off, another handler or a filter is on the way, the text format).

    A hot path (the gateway's ``request`` line) hands such a handler its line directly,
    without a ``LogRecord``, and the line is the same; with any other set-up (a test
    capturing records, an application's own handlers) it logs as usual.
    """
    if not logger.isEnabledFor(level):
        return None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        if current.handlers:
            break
        current = current.parent if current.propagate else None
    if current is None or len(current.handlers) != 1:
        return None
    handler = current.handlers[0]
    if (type(handler) is not LineHandler or handler.filters or level < handler.level
            or type(handler.formatter) is not JsonFormatter):
        return None
    return handler


def info(logger: logging.Logger, event: str, fields: dict[str, Any]) -> None:
    """``logger.info(event, extra=fields)``; on the event loop thread, when
    :func:`json_sink` finds the line handler alone on the way, the same line is handed to
    it directly (no ``LogRecord``: a few microseconds instead of about ten)."""
    sink = json_sink(logger, logging.INFO)
    if sink is None or not sink.emit_json({
        "ts": iso_time(time.time()), "level": "info", "logger": logger.name, "event": event,
        **fields,
    }):
        logger.info(event, extra=fields, stacklevel=2)


def client_errors(record: logging.LogRecord) -> bool:
    """aiohttp.server's ERROR tracebacks about what a client sent, once per such request
    anyone sends (docs/logging.md):

    * a request body it could not read (``RequestPayloadError``: not the gzip its
      ``Content-Encoding`` says), met again reading the rest of the body after the gateway
      answered it 400 (``request_unreadable``): not logged;
    * a malformed HTTP request (a header or URL over 8190 bytes, a bad ``Content-Length``),
      which aiohttp answers 400 itself: one INFO line ``http_request_malformed`` naming
      the error's class, without the traceback or the request's bytes (a token may be in
      them).
    """
    exc = record.exc_info[1] if record.exc_info else None
    names = {cls.__name__ for cls in type(exc).__mro__}  # aiohttp's, not imported here
    if "RequestPayloadError" in names:
        return False
    if "HttpProcessingError" in names:
        record.msg, record.args = "http_request_malformed", None
        record.error = type(exc).__name__
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger().isEnabledFor(logging.INFO)
    return True


def configure(level: str = "INFO", format: str = "json") -> None:
    """Send ``json`` (or ``text``) lines to stderr at ``level`` (docs/logging.md); the
    gateway's own ``request`` lines replace aiohttp's access log."""
    # Fields no line carries (docs/logging.md): not looked up for every record.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = LineHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if format == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if client_errors not in server.filters:
        server.addFilter(client_errors)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Their DEBUG lines carry SQL parameters (tokens, payloads): never below WARNING.
    for name in ("aiosqlite", "asyncpg", "sqlalchemy"):
        logging.getLogger(name).setLevel(logging.WARNING)
