"""Dead-lettered webhook events: list, show, replay (docs/webhooks.md).

An outbox row is ``dead`` when its ``completed`` event (or an operator webhook event,
docs/webhooks.md "Operator webhook") exhausted the retry schedule,
when the SSRF guard refused its target at delivery, or when its endpoint answered (or
had answered) 410 Gone. A replay puts a dead row back to ``pending`` with its attempts
reset, due now, under the same ``msg_id`` (so the receiver's ``webhook-id``
deduplication still works), and re-enables its endpoint if a 410 had disabled it.

The admin API (:mod:`gateway.http.admin`) and the ``cutover webhooks`` commands
(:mod:`gateway.cli`) are thin layers over :class:`DeadLetters`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from contracts.auth import DEFAULT_TENANT
from contracts.errors import Conflict, ContractViolation, NotFound
from gateway.store.deadletters import DeadLetterRows, Ref

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "DeadLetters", "Letter", "table"]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_MAX_ID = 2**31 - 1  # outbox.id is a 32-bit integer on PostgreSQL
_DIGITS_RE = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes "²" and "٣"
_MSG_ID_RE = re.compile(r"msg_[0-9A-Za-z_-]+")  # and no NUL, which PostgreSQL refuses


@dataclass(frozen=True)
class Letter:
    """One outbox event as operators see it (``payload`` only when asked for).

    ``id`` is the outbox row id, ``msg_id`` the ``webhook-id`` the receiver sees,
    ``prediction_id`` the job, ``tenant`` its tenant (docs/security.md); an operator
    webhook event (docs/webhooks.md, "Operator webhook") has no prediction: None, and the
    ``default`` tenant. Times are
    timezone-aware UTC.
    """

    id: int
    msg_id: str
    prediction_id: str | None
    event: str
    status: str
    url: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    payload: Any = None
    tenant: str = DEFAULT_TENANT

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, with_payload: bool = False) -> Letter:
        """A letter from a row of :class:`gateway.store.deadletters.DeadLetterRows`."""
        data = {k: v for k, v in row.items() if k in _FIELDS}
        data["prediction_id"] = row["job_id"]
        data["tenant"] = row.get("tenant") or DEFAULT_TENANT
        data["payload"] = json.loads(row["payload"]) if with_payload else None
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 strings; no ``payload`` key when unset)."""
        data = asdict(self)
        if self.payload is None:
            del data["payload"]
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in data.items()}


_FIELDS = {
    "id", "msg_id", "event", "status", "url", "attempts", "created_at", "next_attempt_at",
    "last_attempt_at", "delivered_at", "last_status_code", "last_error",
}  # fmt: skip


class DeadLetters:
    """Reads and replays dead-lettered outbox rows.

    Parameters
    ----------
    rows : DeadLetterRows
        The outbox rows in the store.
    """

    def __init__(self, rows: DeadLetterRows) -> None:
        self._rows = rows

    async def list_dead(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[Letter]:
        """Dead events created in ``[since, until)``, newest first, at most ``limit``.

        Raises
        ------
        ContractViolation
            ``limit`` outside 1..:data:`MAX_LIMIT`, or ``since`` not before ``until``.
        """
        if not 1 <= limit <= MAX_LIMIT:
            raise ContractViolation(f"limit must be between 1 and {MAX_LIMIT}")
        _check_window(since, until)
        found = await self._rows.list_dead(since=since, until=until, limit=limit)
        return [Letter.from_row(row) for row in found]

    async def get(self, ref: str) -> Letter:
        """The event ``ref`` (an outbox id, or a ``msg_...`` webhook id), with its payload.

        Any status may be shown, not only ``dead``.

        Raises
        ------
        NotFound
            No such event.
        """
        row = await self._rows.find(_ref(ref))
        if row is None:
            raise NotFound(f"webhook event {ref!r} does not exist")
        return Letter.from_row(row, with_payload=True)

    async def replay(self, ref: str) -> Letter:
        """Put the dead event ``ref`` back to ``pending``, due now, attempts reset.

        Raises
        ------
        NotFound
            No such event.
        Conflict
            The event is not dead (it is pending, delivered, dropped or superseded).
        """
        ids = await self._rows.revive(_ref(ref))
        if not ids:
            current = await self.get(ref)
            raise Conflict(
                f"webhook event {ref!r} is {current.status}, not dead; only dead events "
                "can be replayed"
            )
        return await self.get(str(ids[0]))

    async def replay_range(self, *, since: datetime, until: datetime) -> list[int]:
        """Replay every dead event created in ``[since, until)``; return their ids.

        Raises
        ------
        ContractViolation
            ``since`` is not before ``until``.
        """
        _check_window(since, until)
        return await self._rows.revive_range(since=since, until=until)

    async def disabled_endpoints(self) -> list[dict[str, Any]]:
        """Endpoints disabled by a 410: ``url``, ``disabled_at`` (ISO 8601), ``reason``."""
        return [
            {"url": r["url"], "disabled_at": r["disabled_at"].isoformat(), "reason": r["reason"]}
            for r in await self._rows.disabled_endpoints()
        ]


def _ref(ref: str) -> Ref:
    text = ref.strip()
    digits = text.lstrip("0") or "0"
    if _DIGITS_RE.fullmatch(text) and len(digits) <= len(str(_MAX_ID)) and int(digits) <= _MAX_ID:
        return int(digits)
    if _MSG_ID_RE.fullmatch(text):
        return text
    raise NotFound(f"webhook event {ref!r} does not exist (use an event id or a msg_ id)")


def _check_window(since: datetime | None, until: datetime | None) -> None:
    if since is not None and until is not None and since >= until:
        raise ContractViolation("since must be earlier than until")


_HEADINGS = ("ID", "MSG_ID", "PREDICTION", "EVENT", "TRIES", "CODE", "CREATED", "ERROR")


def table(letters: Sequence[Letter], *, tenants: bool = False) -> str:
    """Dead events as an aligned text table, as ``cutover webhooks list-dead`` prints them
    (errors cut at 60 characters); ``tenants`` (with ``[[tenants]]``): a TENANT column
    after the prediction."""
    rows = [
        (
            str(x.id),
            x.msg_id,
            x.prediction_id or "-",  # an operator webhook event's (docs/webhooks.md)
            *((x.tenant,) if tenants else ()),
            x.event,
            str(x.attempts),
            str(x.last_status_code or "-"),
            x.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            _cut(x.last_error or "", 60),
        )
        for x in letters
    ]
    headings = (*_HEADINGS[:3], "TENANT", *_HEADINGS[3:]) if tenants else _HEADINGS
    widths = [max(len(r[i]) for r in [headings, *rows]) for i in range(len(headings))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [headings, *rows]
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
