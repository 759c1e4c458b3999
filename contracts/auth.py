"""The one parser of ``Authorization`` headers (docs/replicate-api.md §1: ``Bearer
<token>``, or the legacy ``Token <token>``; docs/cog.md: Cog's webhooks carry ``Bearer
<token>``). Pure text in, text out: the callers compare tokens in constant time."""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["bearer_token", "credentials"]


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
