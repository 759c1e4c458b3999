"""Identifiers and tokens the gateway makes.

Prediction ids follow Replicate's shape (docs/replicate-api.md §2.4, §4.1): 26 lowercase
alphanumeric characters, path-safe without URL-encoding (base32 of 128 random bits).
"""

from __future__ import annotations

import base64
import re
import secrets

__all__ = ["PREDICTION_ID_RE", "callback_token", "new_prediction_id"]

PREDICTION_ID_RE = re.compile(r"^[a-z0-9]{26}$")


def new_prediction_id() -> str:
    """A fresh prediction id: 26 characters from ``a-z2-7``."""
    return base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def callback_token() -> str:
    """An unguessable per-job token (256 bits, URL-safe) for provider webhook URLs."""
    return secrets.token_urlsafe(32)
