"""Outbound webhook bodies and their Standard Webhooks signatures.

The gateway signs every webhook it sends to a legacy app the way Replicate does
(docs/replicate-api.md §6.4): ``webhook-signature`` carries ``v1,<base64 HMAC-SHA256>`` of
``"{webhook-id}.{webhook-timestamp}.{body}"``, keyed with the base64-decoded part of a
``whsec_`` secret.

Two client quirks (§6.5) shape this module:

* the Python client splits the secret on ``_`` and wants exactly two parts, so the base64
  part of a secret never contains ``_`` (standard alphabet, not URL-safe);
* the JS client may re-serialise an already parsed body with ``JSON.stringify`` before it
  checks the signature, so the bytes we sign and send are exactly what
  ``JSON.stringify(JSON.parse(body))`` produces (:func:`gateway.wire.compact_json`).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from datetime import UTC, datetime

import standardwebhooks

from contracts import errors

__all__ = ["SECRET_PREFIX", "Signer", "check_secret", "generate_secret"]

SECRET_PREFIX = "whsec_"  # noqa: S105 - the scheme's prefix, not a secret
_SECRET_BYTES = 32
_BAD_MSG_ID = re.compile(r"[\s\x00-\x1f\x7f]")


def generate_secret() -> str:
    """Make a new webhook signing secret.

    Returns
    -------
    str
        ``whsec_`` followed by the standard base64 (``+/``, padded) of 32 random bytes:
        50 characters. The base64 part never contains ``_`` (§6.5, Python client).
    """
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode("ascii")


# --- the signature ---------------------------------------------------------------------


class Signer:
    """Signs outbound webhooks, with an optional rotation overlap.

    Parameters
    ----------
    secret : str
        The current ``whsec_<base64>`` secret.
    previous_secret : str, optional
        The secret being rotated out; its signature is added while the overlap lasts.
    previous_valid_until : datetime, optional
        Timezone-aware end of the overlap; required with ``previous_secret``.

    Raises
    ------
    contracts.errors.ConfigurationError
        A secret that is not ``whsec_`` + standard base64 of a non-empty key, a base64
        part containing ``_`` (the Python client would refuse it, §6.5), or an
        overlap given without an aware deadline.

    Notes
    -----
    The HMAC is computed by ``standardwebhooks.Webhook.sign``, the reference library of
    the scheme. Its API takes the body as ``str`` and the timestamp as ``datetime``, so
    the body is decoded from UTF-8 and re-encoded there; :func:`gateway.wire.compact_json` output is
    always valid UTF-8.
    """

    def __init__(
        self,
        secret: str,
        *,
        previous_secret: str | None = None,
        previous_valid_until: datetime | None = None,
    ) -> None:
        self._current = standardwebhooks.Webhook(_checked_secret(secret))
        self._previous: standardwebhooks.Webhook | None = None
        self._previous_valid_until = previous_valid_until
        if previous_secret is None:
            if previous_valid_until is not None:
                raise errors.ConfigurationError("previous_valid_until given without a secret")
            return
        if previous_valid_until is None or previous_valid_until.tzinfo is None:
            raise errors.ConfigurationError(
                "a previous webhook secret needs a timezone-aware previous_valid_until"
            )
        self._previous = standardwebhooks.Webhook(_checked_secret(previous_secret))

    def __repr__(self) -> str:
        return f"Signer(previous_valid_until={self._previous_valid_until!r})"

    def sign(self, msg_id: str, timestamp_s: int, body: bytes, *, now: datetime) -> str:
        """Compute the ``webhook-signature`` header value (§6.4).

        Parameters
        ----------
        msg_id : str
            The ``webhook-id``: the same on every retry of one message.
        timestamp_s : int
            The ``webhook-timestamp``: Unix seconds of this attempt.
        body : bytes
            The exact UTF-8 body sent (:func:`gateway.wire.compact_json` output).
        now : datetime
            Timezone-aware current time; decides whether the rotation overlap is open.

        Returns
        -------
        str
            ``v1,<base64>`` for the current secret, followed by `` v1,<base64>`` for the
            previous secret while ``now < previous_valid_until``.

        Raises
        ------
        ValueError
            An empty ``msg_id`` or one with whitespace or control characters, a naive
            ``now``, or a body that is not UTF-8.
        TypeError
            ``timestamp_s`` is not an ``int`` (a float would be floored in the signature
            but not in the header).
        """
        if not msg_id or _BAD_MSG_ID.search(msg_id):
            raise ValueError("webhook id must be non-empty, without whitespace or controls")
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        if isinstance(timestamp_s, bool) or not isinstance(timestamp_s, int):
            raise TypeError("timestamp_s must be whole Unix seconds (int)")
        when = datetime.fromtimestamp(timestamp_s, tz=UTC)
        text = body.decode("utf-8")
        signatures = [self._current.sign(msg_id, when, text)]
        if self._previous is not None and self._previous_valid_until is not None:
            if now < self._previous_valid_until:
                signatures.append(self._previous.sign(msg_id, when, text))
        return " ".join(signatures)

    def headers(
        self, msg_id: str, timestamp_s: int, body: bytes, *, now: datetime
    ) -> dict[str, str]:
        """Build the three Standard Webhooks headers of one delivery attempt (§6.4).

        Parameters and errors are those of :meth:`sign`.

        Returns
        -------
        dict[str, str]
            ``webhook-id``, ``webhook-timestamp`` (decimal seconds) and
            ``webhook-signature``, with lowercase names (the JS client reads plain-object
            headers by lowercase key only, §6.5).
        """
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp_s),
            "webhook-signature": self.sign(msg_id, timestamp_s, body, now=now),
        }


def check_secret(secret: str) -> None:
    """Raise ``ConfigurationError`` (never naming the secret) for a secret the signer
    refuses: the configuration checks ``[webhooks] signing_secret`` with it at load."""
    _checked_secret(secret)


def _checked_secret(secret: str) -> bytes:
    """Decode a ``whsec_`` secret strictly; never put the secret in the error."""
    if not secret.startswith(SECRET_PREFIX):
        raise errors.ConfigurationError("webhook secret must start with 'whsec_'")
    encoded = secret[len(SECRET_PREFIX) :]
    if "_" in encoded:
        raise errors.ConfigurationError(
            "webhook secret must use standard base64 with no '_' (the Python client "
            "splits the secret on '_')"
        )
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise errors.ConfigurationError("webhook secret is not valid base64") from None
    if not key:
        raise errors.ConfigurationError("webhook secret key is empty")
    return key
