"""Console sign-in, sessions, CSRF and Origin checks (docs/console.md, "Sessions").

Signing in posts an admin token once; the browser then holds only an opaque session id
(256 random bits) in a cookie: ``HttpOnly``, ``SameSite=Strict``, ``Path=/admin/console``,
and ``Secure`` (named ``__Secure-cutover_console``) when the gateway is reached over TLS.
The store keeps the id's SHA-256, the admin token's digest and a CSRF token
(:mod:`gateway.store.sessions`), so every process sharing the store accepts the session,
and a token removed from the config (or given a new secret) ends its sessions. Every
change (a POST) must come from the console's own origin (``Origin``) and carry the
session's CSRF token; the admin API never reads the cookie.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from contracts.auth import same_secret
from contracts.errors import Forbidden, Unauthenticated
from gateway.http.admintokens import AdminTokens, Identity
from gateway.store.sessions import ConsoleSessions, Session

__all__ = ["PREFIX", "SignedIn", "check_change", "cookie_name", "is_secure", "origin_of",
           "sign_in", "sign_out", "signed_in"]

PREFIX = "/admin/console"
_COOKIE = "cutover_console"
_SECURE_COOKIE = "__Secure-cutover_console"


@dataclass(frozen=True)
class SignedIn:
    """The person behind a request: their admin token's identity and their session."""

    identity: Identity
    session: Session
    session_id: str


def is_secure(request: web.Request, public_url: str) -> bool:
    """Reached over TLS (here, or at the public URL a proxy terminates TLS for)."""
    return request.secure or urlsplit(public_url).scheme == "https"


def cookie_name(secure: bool) -> str:
    return _SECURE_COOKIE if secure else _COOKIE


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


async def signed_in(request: web.Request, tokens: AdminTokens, sessions: ConsoleSessions,
                    *, touch: bool) -> SignedIn | None:
    """The live session the request's cookie names and its token's identity, or None."""
    session_id = request.cookies.get(_SECURE_COOKIE) or request.cookies.get(_COOKIE)
    if not session_id or len(session_id) > 128:
        return None
    session = await sessions.find(session_id, touch=touch)
    if session is None:
        return None
    identity = tokens.by_digest(session.token_digest)
    return None if identity is None else SignedIn(identity, session, session_id)


def check_origin(request: web.Request, public_url: str) -> None:
    """Refuse (403) a change whose ``Origin`` is not the console's own."""
    origin = request.headers.get("Origin")
    here = {origin_of(f"{request.scheme}://{request.host}"), origin_of(public_url)}
    if origin is None or origin.lower() not in here:
        raise Forbidden("this request did not come from the console's own page (its Origin "
                        f"is {origin or 'missing'}); nothing was changed")


def check_change(request: web.Request, who: SignedIn, form_csrf: str | None,
                 public_url: str) -> None:
    """A change needs the console's Origin and the session's CSRF token (403 otherwise,
    nothing changed)."""
    check_origin(request, public_url)
    if not form_csrf or not same_secret(form_csrf, who.session.csrf_token):
        raise Forbidden("this form is out of date or not the console's (its CSRF token does "
                        "not match the session's): reload the page; nothing was changed")


async def sign_in(request: web.Request, response: web.StreamResponse, token: str,
                  tokens: AdminTokens, sessions: ConsoleSessions, public_url: str) -> Identity:
    """Open a session for admin ``token`` and set its cookie on ``response``.

    Raises
    ------
    Unauthenticated
        Not one of the admin tokens.
    """
    check_origin(request, public_url)
    identity = tokens.identify(token.strip())
    if identity is None:
        raise Unauthenticated("that is not one of the gateway's admin tokens")
    session_id = secrets.token_urlsafe(32)
    await sessions.open(session_id, token_digest=identity.digest,
                        csrf_token=secrets.token_urlsafe(32))
    secure = is_secure(request, public_url)
    response.set_cookie(cookie_name(secure), session_id, path=PREFIX, httponly=True,
                        secure=secure, samesite="Strict")
    return identity


async def sign_out(request: web.Request, response: web.StreamResponse, who: SignedIn,
                   sessions: ConsoleSessions, public_url: str) -> None:
    """Revoke the session in the store and clear its cookie."""
    await sessions.close(who.session_id)
    secure = is_secure(request, public_url)
    response.del_cookie(cookie_name(secure), path=PREFIX, secure=secure, samesite="Strict")
