"""fal webhook signatures: Ed25519 over four lines, keys from a JWKS (docs/providers.md, fal).

The scheme::

    message   = request_id "\\n" user_id "\\n" timestamp "\\n" hex(sha256(raw body))
    signature = hex, in X-Fal-Webhook-Signature
    headers   = X-Fal-Webhook-Request-Id, -User-Id, -Timestamp (Unix seconds)

A delivery verifies when any Ed25519 key of the JWKS (``{"kty": "OKP", "crv":
"Ed25519", "x": <base64url of 32 bytes>}``) verifies the signature and the timestamp is
within ``tolerance_s`` (300 s) of now, in either direction. The body is hashed exactly as
received: re-serialised JSON does not verify.

:class:`JwksCache` fetches the key set lazily, keeps it for at most ``max_age_s`` (24 h),
and when no cached key verifies a delivery it fetches the set again (at most once per
``min_refresh_s``) before refusing it, so a key rotation costs one extra fetch.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.errors import WebhookVerificationError

__all__ = [
    "DEFAULT_JWKS_URL",
    "HEADERS",
    "JwksCache",
    "load_keys",
    "signed_message",
    "verify",
]

DEFAULT_JWKS_URL = "https://rest.alpha.fal.ai/.well-known/jwks.json"
HEADERS = (
    "x-fal-webhook-request-id",
    "x-fal-webhook-user-id",
    "x-fal-webhook-timestamp",
    "x-fal-webhook-signature",
)
TOLERANCE_S = 300.0


def load_keys(jwks: Any) -> list[Ed25519PublicKey]:
    """The Ed25519 keys of a JWKS document; other key types are skipped."""
    keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
    found = []
    for item in keys if isinstance(keys, list) else []:
        if not isinstance(item, Mapping) or item.get("kty") != "OKP":
            continue
        if item.get("crv") != "Ed25519" or not isinstance(item.get("x"), str):
            continue
        try:
            raw = base64.urlsafe_b64decode(item["x"] + "=" * (-len(item["x"]) % 4))
            found.append(Ed25519PublicKey.from_public_bytes(raw))
        except (ValueError, binascii.Error):
            continue
    return found


def signed_message(request_id: str, user_id: str, timestamp: str, body: bytes) -> bytes:
    """The bytes fal signs for one delivery."""
    digest = hashlib.sha256(body).hexdigest()
    return f"{request_id}\n{user_id}\n{timestamp}\n{digest}".encode()


def _header(headers: Mapping[str, str], name: str) -> str:
    value = next((v for k, v in headers.items() if k.lower() == name), None)
    if not value:
        raise WebhookVerificationError(f"fal webhook without {name}")
    return value.strip()


def verify(
    headers: Mapping[str, str],
    body: bytes,
    keys: Sequence[Ed25519PublicKey],
    now_s: float,
    tolerance_s: float = TOLERANCE_S,
) -> None:
    """Check one delivery against ``keys`` at time ``now_s`` (Unix seconds).

    Raises
    ------
    WebhookVerificationError
        A header is missing, the timestamp is not an integer or is outside the window
        ("stale timestamp"), or no key verifies the signature ("bad signature").
    """
    request_id, user_id, timestamp, signature = (_header(headers, h) for h in HEADERS)
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("fal webhook timestamp is not an integer") from None
    if abs(now_s - sent_at) > tolerance_s:
        raise WebhookVerificationError("fal webhook has a stale timestamp")
    try:
        raw_signature = bytes.fromhex(signature)
    except ValueError:
        raise WebhookVerificationError("fal webhook signature is not hex") from None
    message = signed_message(request_id, user_id, timestamp, body)
    for key in keys:
        try:
            key.verify(raw_signature, message)
        except InvalidSignature:
            continue
        return
    raise WebhookVerificationError("fal webhook has a bad signature")


class JwksCache:
    """fal's public keys, fetched on first use and refreshed as described above.

    Parameters
    ----------
    fetch : callable
        ``async () -> JWKS document`` (the adapter's HTTP call).
    max_age_s : float
        Longest time a fetched key set is used (fal asks for at most 24 h).
    min_refresh_s : float
        Shortest time between two fetches triggered by a failed verification.
    clock : callable
        Unix seconds, injectable for tests.
    """

    def __init__(
        self,
        fetch: Callable[[], Awaitable[Any]],
        *,
        max_age_s: float = 24 * 3600.0,
        min_refresh_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._min_refresh_s = min_refresh_s
        self._clock = clock
        self._keys: list[Ed25519PublicKey] = []
        self._fetched_at: float | None = None

    async def _refresh(self) -> None:
        self._keys = load_keys(await self._fetch())
        self._fetched_at = self._clock()

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Verify one delivery; see :func:`verify` for the errors."""
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at > self._max_age_s:
            await self._refresh()
        try:
            verify(headers, body, self._keys, now)
        except WebhookVerificationError as exc:
            stale_keys = self._fetched_at is None or now - self._fetched_at >= self._min_refresh_s
            if "bad signature" not in exc.detail or not stale_keys:
                raise
            await self._refresh()
            verify(headers, body, self._keys, now)
