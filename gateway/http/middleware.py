"""HTTP plumbing shared by every handler: problem+json errors, auth, JSON bodies.

:func:`problem_for` turns every error into an RFC 9457 problem document
(``application/problem+json``, docs/replicate-api.md §5.1); no traceback ever reaches a
client. :class:`ApiTokens` checks the API token (``Authorization: Bearer <token>`` or the
legacy ``Token <token>``, §1) on the Replicate API routes. The gateway's one middleware
(:func:`gateway.http.access.front_middleware`) applies both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from contracts.auth import DEFAULT_TENANT, bearer_token, credentials, same_secret
from contracts.errors import ContractViolation, CutoverError, PayloadTooLarge, Unauthenticated
from contracts.replicate import Problem
from gateway import wire
from gateway.http import deadline, keys
from gateway.store.engine import db
from gateway.store.engine import errors as store_errors

__all__ = [
    "ADMIN_ROOT",
    "PUBLIC_PREFIXES",
    "SCOPE_CHARS",
    "TENANT",
    "TOKEN_NAME",
    "ApiTokens",
    "Handler",
    "json_response",
    "parse_body",
    "presented_token",
    "problem_for",
    "problem_response",
    "scope_of",
    "token_scope",
]

log = logging.getLogger(__name__)
TOKEN_NAME = web.RequestKey("token_name", str)  # the caller's API token name
TENANT = web.RequestKey("tenant", str)  # that token's tenant (docs/security.md)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)

PUBLIC_PREFIXES = (
    "/health",
    "/ready",
    "/metrics",
    "/assets/",
    "/streams/",
    "/file-downloads/",
    "/provider-webhooks/",
    "/provider-uploads/",
    "/admin/",
    "/openapi.json",
)
"""Path prefixes the API tokens do not guard (their own checks, or none)."""
ADMIN_ROOT = "/admin"
"""The admin sub-application's own root: its tokens guard it, as they do ``/admin/...``."""

SCOPE_CHARS = 16
"""Hex digits of a token's SHA-256 that name its scope (:func:`token_scope`)."""
_API_SCHEMES = ("bearer", "token")  # ``Token`` is the legacy scheme (docs/replicate-api.md §1)
STORE_RETRY_AFTER_S = 2
"""``Retry-After`` (seconds) of a 503 that names no wait of its own: the database cannot
be reached, is locked or busy, or could not serialise the request's transaction."""

_HTTP_TITLES = {
    404: "Not found",
    405: "Method not allowed",
    413: "Payload too large",
    415: "Unsupported media type",
}


def presented_token(request: web.Request) -> str:
    """The token the request's ``Authorization`` header carries, whatever its scheme
    (``""`` without one): :func:`contracts.auth.credentials`."""
    return credentials(request.headers.get("Authorization"))[1]


def token_scope(request: web.Request) -> str:
    """Who is calling, without the token: :data:`SCOPE_CHARS` hex digits of its SHA-256
    (idempotency keys and uploaded files belong to it)."""
    return scope_of(presented_token(request))


def scope_of(token: str) -> str:
    """The scope of ``token`` (:func:`token_scope`)."""
    return hashlib.sha256(token.encode(errors="surrogateescape")).hexdigest()[:SCOPE_CHARS]


def json_response(data: Any, status: int = 200, **kwargs: Any) -> web.Response:
    """A compact JSON response (UTF-8, made by orjson)."""
    return web.Response(
        body=wire.dumps(data), status=status, content_type="application/json",
        charset="utf-8", **kwargs,
    )


def problem_response(status: int, title: str, detail: str) -> web.Response:
    """A problem+json response."""
    body = Problem(title=title, status=status, detail=detail).model_dump()
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/problem+json"
    )


def problem_for(request: web.Request, exc: Exception) -> web.Response:
    """The problem+json response for an error a handler raised (docs/replicate-api.md
    §5.1); unexpected errors are logged with context, never shown to the client.

    Raises
    ------
    web.HTTPException
        ``exc`` itself when it is an HTTP exception under 400 (a redirect): not an error.
    """
    if isinstance(exc, CutoverError):
        response = problem_response(exc.status, exc.title, exc.detail)
        retry_after = getattr(exc, "retry_after_s", None)
        if retry_after is None and exc.status == 503:
            retry_after = STORE_RETRY_AFTER_S
        if retry_after is not None:
            response.headers["Retry-After"] = str(max(1, round(retry_after)))
        return response
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        detail = _http_detail(request, exc)
        response = problem_response(exc.status, _HTTP_TITLES.get(exc.status, exc.reason), detail)
        if "Allow" in exc.headers:  # a 405 must say what is allowed (RFC 9110 §15.5.6)
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    if isinstance(exc, web.RequestPayloadError):  # a body that cannot be read as it was sent
        cause = exc.__cause__
        why = cause.message if isinstance(cause, HttpProcessingError) else str(exc)
        log.info("request_unreadable", extra={"path": request.path, "error": why.strip()})
        return problem_response(400, "Bad request",
                                f"the request body could not be read: {why.strip()}")
    if _client_gone(request, exc):  # not the store: nobody is left to answer
        log.info("client_disconnected", extra={"path": request.path})
        return problem_response(499, "Client closed request", "the client went away")
    if store_errors.transient(exc):  # away, locked or busy: retry later, say when
        return _store_unavailable(request, exc)
    log.error("unhandled_error", exc_info=exc, extra={"path": request.path})
    return problem_response(500, "Internal error", "the gateway failed; see its logs")


def _client_gone(request: web.Request, exc: Exception) -> bool:
    """Whether ``exc`` is aiohttp telling the handler its client disconnected (a body
    read or a response write on a closed connection), not a store or provider error."""
    transport = request.transport
    return isinstance(exc, ConnectionResetError) and (
        transport is None or transport.is_closing())


def _store_unavailable(request: web.Request, exc: Exception) -> web.Response:
    """503 with ``Retry-After`` for a transient store error (docs/reliability.md,
    "Dependency outages"): the database cannot be reached, or it is locked or busy."""
    away = db.unreachable(exc)
    log.warning("store_unreachable" if away else "store_busy",
                extra={"path": request.path, "error": type(exc).__name__})
    why = "cannot be reached" if away else "is busy"
    response = problem_response(503, "Service unavailable", f"the gateway's database {why}; retry")
    response.headers["Retry-After"] = str(STORE_RETRY_AFTER_S)
    return response


def _http_detail(request: web.Request, exc: web.HTTPException) -> str:
    if exc.status == 404 and request.path.startswith("/v1/v1/"):  # README "Using it"
        return ("The requested resource could not be found: the path starts /v1/v1/. The "
                "Python client adds /v1 to its base_url itself: give it the gateway's URL "
                "without /v1")
    if exc.status == 404:
        return "The requested resource could not be found."
    if exc.status == 405:
        return f"{request.method} is not allowed on {request.path}"
    if exc.status == 413:
        return deadline.too_large(request.app[keys.EDGE].max_body_bytes)
    return exc.text or exc.reason


class ApiTokens:
    """The API tokens accepted outside :data:`PUBLIC_PREFIXES`, and who presents them.

    ``tokens`` maps a name to each token (a plain iterable names them ``token-1``,
    ``token-2``...); ``tenants`` maps a name to its tenant (``default`` when absent).
    :meth:`name_of` compares the presented token with every accepted one in constant time,
    then remembers the ``Authorization`` value that passed (at most :data:`MAX_REMEMBERED`
    of them), so the same header is answered by one dictionary lookup next time. Only
    accepted values are remembered: a refused header is compared again every time, and no
    number of refused headers grows the memory.
    """

    MAX_REMEMBERED = 64

    def __init__(
        self, tokens: Iterable[str] | Mapping[str, str], tenants: Mapping[str, str] | None = None
    ) -> None:
        self._tenants = dict(tenants or {})
        named = (
            dict(tokens)
            if isinstance(tokens, Mapping)
            else {f"token-{i}": t for i, t in enumerate(tokens, start=1)}
        )
        self._accepted = [(name, t.encode()) for name, t in named.items()]
        self._passed: dict[str, str] = {}

    def tenant_of(self, name: str) -> str:
        """The tenant of the token named ``name`` (:meth:`name_of`)."""
        return self._tenants.get(name, DEFAULT_TENANT)

    def name_of(self, authorization: str | None) -> str:
        """The name of the token ``authorization`` (the header's value) carries.

        Raises
        ------
        Unauthenticated
            No token, or not one of the accepted tokens (401).
        """
        if authorization is not None:
            name = self._passed.get(authorization)
            if name is not None:
                return name
        token = bearer_token(authorization, _API_SCHEMES)
        if not token:
            raise Unauthenticated("You did not pass an authentication token")
        found = None
        for name, expected in self._accepted:  # every comparison runs: constant time overall
            if same_secret(token, expected) and found is None:
                found = name
        if found is None:
            raise Unauthenticated("You did not pass a valid authentication token")
        if authorization is not None and len(self._passed) < self.MAX_REMEMBERED:
            self._passed[authorization] = found
        return found


async def json_object(request: web.Request) -> dict[str, Any]:
    """An admin request's JSON object body (an empty body is ``{}``).

    Raises
    ------
    ContractViolation
        Not JSON, or not an object.
    """
    try:
        body = json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractViolation(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ContractViolation("the request body must be a JSON object")
    return body


async def parse_body(request: web.Request, model: type[M]) -> M:
    """The request body validated as ``model``.

    Raises
    ------
    PayloadTooLarge
        The body exceeds the configured limit.
    ContractViolation
        Malformed JSON (including ``NaN``/``Infinity`` and absurd nesting), not an
        object, or a field of the wrong type (the detail names each offending field).
    """
    limit = request.app[keys.EDGE].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(deadline.too_large(limit))  # said at once, not after reading
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLarge(deadline.too_large(limit)) from exc
    try:
        body = raw or b"null"  # json.loads of bytes, with a decoder made once (not per call)
        data = _BODY_JSON.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except RecursionError as exc:
        raise ContractViolation("the request body is nested too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractViolation(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ContractViolation("the request body must be a JSON object")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise ContractViolation(_explain(exc)) from exc


def _finite_float(text: str) -> float:
    """A JSON number as a float, refusing ones too large for a double (``1e999``)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:20]} is too large")
    return value


def _reject_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259 §6)."""
    raise ValueError(f"{name} is not a JSON value")


_BODY_JSON = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _explain(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "body"
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "is not a field of this request"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
