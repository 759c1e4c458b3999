"""One webhook delivery attempt: what it gave, and what happens to the event next.

A pure policy (docs/architecture.md, rule 13): :func:`decide` reads the attempt's result, the event
kind and the retry schedule, and returns the row's next status and due time; the caller
persists it (:mod:`gateway.webhooks.delivery`). Rules (docs/replicate-api.md §6.1, §6.3):

==========================  =====================================================
2xx                         ``delivered``
410 Gone                    ``dead``, and the endpoint is to be disabled
refused by the SSRF guard   ``dead`` at once (retrying cannot help)
anything else               ``completed`` and ``operator`` (docs/webhooks.md,
(3xx, 4xx, 5xx, timeout,    "Operator webhook"): retried on the schedule
connection error)           (``Retry-After`` honoured), ``dead`` once it is spent;
                            ``start``, ``output``, ``logs``: ``dropped`` (one
                            attempt only)
==========================  =====================================================
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from contracts.replicate import WebhookEvent
from gateway import retry
from gateway.rollout.announce import OUTBOX_EVENT
from gateway.store.records import DeliveryStatus

__all__ = ["Attempt", "Decision", "decide"]


@dataclass(frozen=True)
class Attempt:
    """The result of one POST: a status code, or an error without one.

    ``refused`` marks a refusal by the SSRF guard (nothing was connected).
    """

    status_code: int | None = None
    retry_after: str | None = None
    error: str | None = None
    refused: bool = False


@dataclass(frozen=True)
class Decision:
    """The row's next state after an attempt."""

    status: DeliveryStatus
    next_attempt_at: datetime | None = None
    error: str | None = None
    disable_endpoint: bool = False


def decide(
    event: str,
    attempt: int,
    result: Attempt,
    now: datetime,
    schedule: retry.Schedule,
    rng: random.Random,
) -> Decision:
    """Decide a row's fate after attempt number ``attempt`` (1-based) of ``event``.

    Parameters
    ----------
    event : str
        ``start``, ``output``, ``logs``, ``completed`` or ``operator``.
    attempt : int
        How many attempts were made, this one included.
    result : Attempt
        What the attempt gave.
    now : datetime
        Timezone-aware time the attempt ended; retries are scheduled from it.
    schedule, rng
        The retry policy and its random source (for jitter).

    Returns
    -------
    Decision
        See the table in the module docstring.
    """
    code = result.status_code
    if code is not None and 200 <= code < 300:
        return Decision(DeliveryStatus.DELIVERED)
    if result.refused:
        return Decision(DeliveryStatus.DEAD, error=f"refused by the SSRF guard: {result.error}")
    if code == 410:
        gone = "410 Gone: the endpoint is now disabled"
        return Decision(DeliveryStatus.DEAD, error=gone, disable_endpoint=True)
    error = result.error or _http_error(code)
    if event not in (WebhookEvent.COMPLETED, OUTBOX_EVENT):
        dropped = f"{error} (non-terminal events are not retried)"
        return Decision(DeliveryStatus.DROPPED, error=dropped)
    wait_s = retry.parse_retry_after(result.retry_after, now)
    due = schedule.next_attempt_at(attempt, now, rng, wait_s)
    if due is None:
        tries = f"{attempt} attempt" + ("s" if attempt != 1 else "")
        return Decision(DeliveryStatus.DEAD, error=f"{error}; gave up after {tries}")
    return Decision(DeliveryStatus.PENDING, next_attempt_at=due, error=error)


def _http_error(code: int | None) -> str:
    if code is not None and 300 <= code < 400:
        return f"HTTP {code} (redirects are not followed)"
    return f"HTTP {code}"
