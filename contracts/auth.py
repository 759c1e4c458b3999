"""The one parser of ``Authorization`` headers (docs/replicate-api.md §1: ``Bearer
<token>``, or the legacy ``Token <token>``; docs/cog.md: Cog's webhooks carry ``Bearer
<token>``). Pure text in, text out; :func:`same_secret` is the one constant-time compare
of a presented token, capability or signature with the expected one (docs/security.md).

A token belongs to one tenant (docs/security.md): the tokens of ``[gateway] api_tokens``
to :data:`DEFAULT_TENANT`, those of a ``[[tenants]]`` entry to that entry's name."""

from __future__ import annotations

import hmac
import re
from collections.abc import Collection

__all__ = [
    "DEFAULT_TENANT", "TENANT_CHARS", "TENANT_NAME_RE", "bearer_token", "credentials",
    "same_secret",
]

DEFAULT_TENANT = "default"
"""The tenant of ``[gateway] api_tokens``, and of every prediction stored before tenants."""
TENANT_CHARS = 32
"""The longest tenant name (``jobs.tenant`` holds it)."""
TENANT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""A tenant name: lower-case letters, digits, ``_`` and ``-``, starting with a letter or digit."""


def same_secret(presented: str | bytes, expected: str | bytes) -> bool:
    """Whether ``presented`` is ``expected``, in constant time, for any input.

    Both are compared as bytes: ``hmac.compare_digest`` raises ``TypeError`` on a ``str``
    with a character outside ASCII (a query value ``?t=%C3%A9`` was a 500). A ``str`` is
    encoded as UTF-8 with ``surrogatepass``, which is one-to-one and never fails, so the
    lone surrogates a decoder leaves for undecodable bytes compare too (and never equal
    a printable token).
    """
    return hmac.compare_digest(_as_bytes(presented), _as_bytes(expected))


def _as_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


def credentials(authorization: str | None) -> tuple[str, str]:
    """``<scheme> <token>`` as ``(scheme in lower case, token)``, both stripped.

    ``None`` or an empty header is ``("", "")``; a header without a space is a scheme
    with an empty token.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    return scheme.lower(), token.strip()


def bearer_token(authorization: str | None, schemes: Collection[str] = ("bearer",)) -> str:
    """The token of ``authorization`` when its scheme is one of ``schemes`` (lower case);
    ``""`` when the header is absent, has another scheme or carries no token."""
    scheme, token = credentials(authorization)
    return token if scheme in schemes else ""
