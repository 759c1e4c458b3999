"""The HTTP side of one webhook attempt: the client session, the POST, its logged outcome.

:class:`gateway.webhooks.delivery.Delivery` decides what is sent when; this module sends
one signed body (:func:`post`) through the session every delivery goes through
(:func:`open_session`, behind the SSRF guard) and turns what happened into an
:class:`gateway.webhooks.attempt.Attempt`.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import AsyncIterator

import aiohttp
from yarl import URL

from gateway.store.records import DeliveryStatus, OutboxRow
from gateway.webhooks import connector, ssrf
from gateway.webhooks.attempt import Attempt, Decision

__all__ = ["USER_AGENT", "host", "log_outcome", "open_session", "post"]

log = logging.getLogger("gateway.webhooks.delivery")  # one logger for delivery

USER_AGENT = "cutover"
_INLINE_BODY_BYTES = 1024 * 1024  # aiohttp warns for raw bytes over 1 MiB: streamed


@contextlib.asynccontextmanager
async def open_session(
    policy: ssrf.WebhookTargetPolicy, *, timeout_s: float, max_concurrency: int
) -> AsyncIterator[aiohttp.ClientSession]:
    """The HTTP client every delivery goes through; closed on exit.

    Built on :func:`gateway.webhooks.connector.connector` (at most ``max_concurrency`` connections),
    a total timeout of ``timeout_s`` seconds per request, no proxy from the environment
    and no cookie jar (one receiver's cookies never reach another).
    """
    session = aiohttp.ClientSession(
        connector=connector.connector(policy, limit=max_concurrency),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
    async with session:
        yield session


async def post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> Attempt:
    """POST ``body`` to ``url`` once, redirects not followed: the status and ``Retry-After``
    of the answer, or the error (``refused`` when the SSRF guard refused the target)."""
    data: bytes | io.BytesIO = io.BytesIO(body) if len(body) > _INLINE_BODY_BYTES else body
    try:
        async with http.post(url, data=data, headers=headers, allow_redirects=False) as response:
            return Attempt(
                status_code=response.status,
                retry_after=response.headers.get("Retry-After"),
            )
    except aiohttp.ClientConnectorError as exc:
        reason = exc.os_error.strerror or str(exc.os_error)
        if isinstance(exc.os_error, ssrf.TargetRefused):
            return Attempt(error=reason, refused=True)
        return Attempt(error=f"connection failed: {reason}")
    except TimeoutError:
        return Attempt(error=f"no response within {http.timeout.total} s")
    except aiohttp.ClientError as exc:
        return Attempt(error=f"{type(exc).__name__}: {exc}")


def host(url: str) -> str:
    """The receiving host of a webhook URL, lower case: as decoded when yarl can decode
    it (IDNA), as written when not (``xn--zz.test``), the whole URL if unparsable."""
    try:
        parsed = URL(url)
    except ValueError:
        return url
    try:
        return (parsed.host or url).lower()
    except ValueError:  # a host yarl parses but cannot IDNA-decode
        return (parsed.raw_host or url).lower()


def log_outcome(row: OutboxRow, result: Attempt, decision: Decision, recorded: bool) -> None:
    """Log one attempt's outcome (``webhook_delivered``, ``webhook_attempt_failed``, or
    ``webhook_outcome_lost_lease`` when another process held the row by then)."""
    context = {
        "job_id": row.job_id,
        "msg_id": row.msg_id,
        "event": row.event,
        "attempt": row.attempts,
        "status_code": result.status_code,
        "outcome": decision.status,
        "host": host(row.url),
    }
    if not recorded:
        log.warning("webhook_outcome_lost_lease", extra=context)
    elif decision.status == DeliveryStatus.DELIVERED:
        log.info("webhook_delivered", extra=context)
    else:
        log.warning("webhook_attempt_failed", extra={**context, "error": decision.error})
