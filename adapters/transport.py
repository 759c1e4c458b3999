"""The HTTP boundary shared by the hosted-provider adapters (fal, RunPod, OpenAI, Replicate).

One place where httpx exceptions, provider error statuses and unreadable bodies become
:mod:`contracts.errors` (docs/architecture.md, rule 5), plus the per-provider request rate limit.

* Transport failures: a failure to *connect* never reached the provider, so it is
  retryable everywhere (a certificate that does not verify is one, and says so:
  ``certificate verify failed: ...``); any later failure (a read timeout, a dropped connection) of a
  call that is not idempotent (a create at fal, RunPod, an OpenAI-compatible server or
  Replicate: none dedupes, docs/providers.md) may have started paid work, so it becomes
  ``UpstreamRejected`` and is never retried blindly.
* Statuses: 429 -> ``ProviderBusy``; 408 and 5xx -> ``UpstreamRetryable``; other 4xx ->
  ``UpstreamRejected``. ``Retry-After`` (seconds or an HTTP date) rides on the error.
* Bodies are read up to ``max_response_bytes``; errors quote at most 200 characters of
  them, so a 10 MB error page becomes a readable one-line error.
* :meth:`Upstream.request` sends and maps an error status; :func:`parse` reads the body
  as the provider's model (an unreadable one is a ``ContractViolation``);
  :meth:`Upstream.create` is both for a non-idempotent create, whose unreadable answer is
  ``UpstreamRejected`` (the work may exist upstream: never resubmitted blindly).
* :class:`RateLimiter` is a token bucket shared by all of a process's jobs on one
  provider. It never sleeps: an empty bucket raises ``ProviderBusy`` with the wait as
  ``retry_after_s``, and the caller persists its next attempt (docs/architecture.md, rule 13).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
from collections.abc import Callable, Collection, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from adapters import errortext, tls
from contracts.errors import (
    ContractViolation,
    ProviderBusy,
    UpstreamRejected,
    UpstreamRetryable,
    UpstreamUnreachable,
)

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "RateLimiter",
    "Upstream",
    "describe",
    "excerpt",
    "json_body",
    "parse",
    "parse_retry_after",
]

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
EXCERPT_CHARS = 200
_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    """At most ``limit`` characters of ``text`` on one line (``(empty body)`` if none)."""
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    flat = " ".join(errortext.scrub(text).split())
    if len(flat) > limit:
        flat = flat[:limit] + "..."
    return flat or "(empty body)"


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN, inf
        return None
    return max(0.0, seconds)


class RateLimiter:
    """A token bucket: ``rate_per_s`` requests per second, bursts of ``burst``.

    Parameters
    ----------
    rate_per_s : float or None
        None: no limit.
    burst : int
        Bucket size (requests that may go at once after a quiet spell).
    clock : callable
        Monotonic seconds (injectable for tests).
    """

    def __init__(
        self, rate_per_s: float | None, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate_per_s
        self._burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self._burst)
        self._at = clock()

    def take(self, name: str) -> None:
        """Spend one token, or raise ``ProviderBusy`` saying when one will be free."""
        if self._rate is None:
            return
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return
        wait_s = (1.0 - self._tokens) / self._rate
        raise ProviderBusy(f"{name}: request rate limit reached", retry_after_s=wait_s)


class Upstream:
    """One provider's HTTP client with the error mapping above.

    Parameters
    ----------
    name : str
        The provider's configured name (for errors).
    base_url : str
        Root of the provider's API.
    headers : dict
        Sent with every request (authentication).
    timeout_s : float
        Timeout of each call, in seconds.
    rate_limit_per_s : float or None
        Requests per second this process may send to the provider.
    max_response_bytes : int
        Larger bodies are refused (``UpstreamRetryable``).
    transport : httpx.AsyncBaseTransport or None
        For tests; None uses the network.
    ca_file : str or None
        PEM file of CA certificates trusted besides certifi's bundle (the provider's
        ``ca_file``: a private CA; :mod:`adapters.tls`).
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        headers: dict[str, str] | None = None,
        timeout_s: float = 30.0,
        rate_limit_per_s: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.limiter = RateLimiter(rate_limit_per_s, burst=max(1, int(rate_limit_per_s or 1)))
        self._timeout_s = timeout_s
        self._max_bytes = max_response_bytes
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers or {},
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            transport=transport,
            trust_env=False,
            verify=tls.client_context(trust_env=False, ca_file=ca_file),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def call(
        self, action: str, method: str, url: str, *, idempotent: bool = True, **kwargs: Any
    ) -> httpx.Response:
        """Send one request (after the rate limit) and read its body, capped.

        Raises
        ------
        ProviderBusy
            The rate limit is reached (nothing was sent).
        UpstreamRetryable
            Could not connect (``UpstreamUnreachable``: nothing was sent); or any
            transport failure of an idempotent call; or the body is larger than
            ``max_response_bytes``.
        UpstreamRejected
            A non-idempotent call failed after it was sent: it may have started work.
        """
        self.limiter.take(self.name)
        with self._errors(action, idempotent):
            request = self.client.build_request(method, url, **kwargs)
            response = await self.client.send(request, stream=True)
            try:
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise UpstreamRetryable(
                            f"{self.name}: {action} answered more than {self._max_bytes} bytes"
                        )
                    chunks.append(chunk)
            finally:
                await response.aclose()
        response._content = b"".join(chunks)  # what httpx.Response.aread() does, capped
        return response

    async def request(
        self, action: str, method: str, url: str, *, idempotent: bool = True,
        allow: Collection[int] = (), **kwargs: Any,
    ) -> httpx.Response:
        """:meth:`call`, then :meth:`raise_for_status` unless the status is in ``allow``
        (a 404 the adapter reads as "gone"). Raises what those two raise."""
        response = await self.call(action, method, url, idempotent=idempotent, **kwargs)
        if response.status_code not in allow:
            self.raise_for_status(action, response)
        return response

    async def create(
        self, action: str, method: str, url: str, model: type[M], **kwargs: Any
    ) -> M:
        """A non-idempotent create: :meth:`request`, then its answer as ``model``.

        Raises
        ------
        ProviderBusy, UpstreamRetryable
            As :meth:`request` (nothing reached the provider, or it said so).
        UpstreamRejected
            A 4xx, a failure after sending, or an answer that is not ``model``: the
            work may exist upstream, so it is not retried.
        """
        response = await self.request(action, method, url, idempotent=False, **kwargs)
        try:
            return parse(self.name, action, response, model)
        except ContractViolation as exc:
            raise UpstreamRejected(
                f"{exc.detail}; it may exist at the provider and is not retried"
            ) from exc

    @contextlib.contextmanager
    def _errors(self, action: str, idempotent: bool) -> Iterator[None]:
        try:
            yield
        except _CONNECT_ERRORS as exc:
            why = tls.verify_failure(exc) or f"cannot connect ({type(exc).__name__})"
            raise UpstreamUnreachable(f"{self.name}: {action}: {why}") from exc
        except httpx.HTTPError as exc:
            what = (
                f"timed out after {self._timeout_s} s"
                if isinstance(exc, httpx.TimeoutException)
                else f"failed ({type(exc).__name__}: {excerpt(str(exc))})"
            )
            if not idempotent:
                raise UpstreamRejected(
                    f"{self.name}: {action} {what} after it was sent; not retried, "
                    "because the provider may have started it and has no idempotent create"
                ) from exc
            raise UpstreamRetryable(f"{self.name}: {action} {what}") from exc

    def raise_for_status(self, action: str, response: httpx.Response) -> None:
        """Map an error status to the error tree (see the module docstring); 2xx passes."""
        code = response.status_code
        if code < 300:
            return
        what = f"{self.name}: {action} answered {code}: {excerpt(response.content)}"
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if code == httpx.codes.TOO_MANY_REQUESTS:
            raise ProviderBusy(what, retry_after_s=retry_after)
        if code >= 500 or code == httpx.codes.REQUEST_TIMEOUT:
            raise UpstreamRetryable(what, retry_after_s=retry_after)
        raise UpstreamRejected(what)


def json_body(name: str, action: str, response: httpx.Response) -> Any:
    """The response's JSON value.

    Raises
    ------
    ContractViolation
        The body is empty or not JSON; the message quotes its start.
    """
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise ContractViolation(
            f"{name}: {action} answered {response.status_code} with a body that is not JSON: "
            f"{excerpt(response.content)}"
        ) from exc


def parse(name: str, action: str, response: httpx.Response, model: type[M]) -> M:
    """The response's body as ``model`` (extra fields as the model says).

    Raises
    ------
    ContractViolation
        Not JSON, or not ``model``: the message names the action and what is wrong.
    """
    try:
        return model.model_validate(json_body(name, action, response))
    except ValidationError as exc:
        raise ContractViolation(
            f"{name}: {action} answered an unreadable body: {describe(exc)}"
        ) from exc


def describe(exc: Exception) -> str:
    """A pydantic ``ValidationError`` (or any error) as one readable line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        parts = []
        for item in errors(include_url=False)[:5]:
            loc = ".".join(str(p) for p in item.get("loc", ()))
            parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
        return "; ".join(parts)
    return excerpt(str(exc))
