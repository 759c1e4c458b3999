"""Structured logs: one JSON object a line, a stable ``event`` plus its context.

Callers log ``log.info("job_submitted", extra={"job_id": ..., "provider": ...})``; the
message is the event name. Secrets, signatures and payloads are never passed in.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

__all__ = ["JsonFormatter", "TextFormatter", "configure"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts", "level", "logger", "event", ...context}``."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        data.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
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


def configure(level: str = "INFO", format: str = "json") -> None:
    """Send ``json`` (or ``text``) lines to stderr at ``level`` (docs/logging.md); the
    gateway's own ``request`` lines replace aiohttp's access log."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if format == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Their DEBUG lines carry SQL parameters (tokens, payloads): never below WARNING.
    for name in ("aiosqlite", "asyncpg", "sqlalchemy"):
        logging.getLogger(name).setLevel(logging.WARNING)
