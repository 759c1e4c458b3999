"""Who an admin token is: its name (the audit's "who") and its role (docs/console.md).

``admin`` tokens may read and change; ``viewer`` tokens only read. The admin API
(:mod:`gateway.http.admin`) identifies the Bearer token of each request; the console
(:mod:`gateway.http.console`) identifies the token once at sign-in and later finds it
again by its digest, which is all a console session keeps of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web

from contracts.auth import same_secret
from contracts.errors import Forbidden

__all__ = ["IDENTITY", "READ_METHODS", "AdminTokens", "Identity", "refuse_viewer"]

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DIGEST_CHARS = 32


@dataclass(frozen=True)
class Identity:
    """An admin token's ``name``, ``role`` (``admin`` or ``viewer``) and ``digest`` (hex
    SHA-256 prefix of the token: what a console session stores instead of the token)."""

    name: str
    role: str
    digest: str

    @property
    def can_change(self) -> bool:
        return self.role == "admin"


IDENTITY = web.RequestKey("admin_identity", Identity)


def _digest(token: bytes) -> str:
    return hashlib.sha256(token).hexdigest()[:_DIGEST_CHARS]


class AdminTokens:
    """The configured admin tokens.

    Parameters
    ----------
    tokens : Iterable of str, (name, token) or (name, token, role)
        An unnamed token is ``admin-N`` (1-based); without a role, ``admin``.
    """

    def __init__(self, tokens: Iterable[str | tuple[str, str] | tuple[str, str, str]]) -> None:
        self._tokens: list[tuple[bytes, Identity]] = []
        for i, entry in enumerate(tokens, 1):
            if isinstance(entry, str):
                name, token, role = f"admin-{i}", entry, "admin"
            else:
                name, token, role = (*entry, "admin")[:3]
            secret = token.encode()
            self._tokens.append((secret, Identity(name, role, _digest(secret))))

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def identify(self, presented: str) -> Identity | None:
        """The identity of ``presented`` (:func:`contracts.auth.same_secret`, in constant
        time, for any input), or None."""
        found = None
        for secret, identity in self._tokens:
            if same_secret(presented, secret):
                found = identity
        return found if presented else None

    def by_digest(self, digest: str) -> Identity | None:
        """The identity whose token has ``digest`` (a session's), or None: a token
        removed from the config, or given a new secret, ends its sessions."""
        found = None
        for _, identity in self._tokens:
            if same_secret(digest, identity.digest):
                found = identity
        return found


def refuse_viewer(identity: Identity) -> None:
    """Raise ``Forbidden`` (403) unless ``identity`` may change things."""
    if not identity.can_change:
        raise Forbidden(f"the admin token {identity.name!r} has the viewer role: it may "
                        "read but not change anything (docs/console.md, 'Roles')")
