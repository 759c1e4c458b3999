"""Identifiers and tokens the gateway makes.

Prediction ids follow Replicate's shape (docs/replicate-api.md §2.4, §4.1): 26 lowercase
alphanumeric characters, path-safe without URL-encoding (base32 of 128 random bits).
A list cursor is opaque to apps: the direction and the position (created_at, id) of the
page's edge, base64url.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from datetime import datetime

from contracts.errors import ContractViolation
from contracts.times import parse_time

__all__ = ["PREDICTION_ID_RE", "callback_token", "decode_cursor", "list_cursor",
           "new_prediction_id"]

PREDICTION_ID_RE = re.compile(r"^[a-z0-9]{26}$")


def new_prediction_id() -> str:
    """A fresh prediction id: 26 characters from ``a-z2-7``."""
    return base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def callback_token() -> str:
    """An unguessable per-job token (256 bits, URL-safe) for provider webhook URLs."""
    return secrets.token_urlsafe(32)


def list_cursor(direction: str, created_at: datetime, job_id: str) -> str:
    """The list cursor for the page ``direction`` (``next``/``prev``) of a job's position."""
    raw = f"{direction}|{created_at.isoformat()}|{job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, tuple[datetime, str]]:
    """``(direction, (created_at, id))`` of a cursor :func:`list_cursor` made;
    ``ContractViolation`` for any other string."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        direction, at, job_id = raw.split("|")
        if direction not in {"next", "prev"}:
            raise ValueError(direction)
        return direction, (parse_time(at, "cursor", naive_is_utc=False), job_id)
    except (ValueError, UnicodeDecodeError, binascii.Error, ContractViolation) as exc:
        raise ContractViolation(f"cursor {cursor!r} is not one this gateway issued") from exc
