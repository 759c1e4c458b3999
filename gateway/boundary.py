"""The per-item error boundary every background loop shares (docs/lifecycle.md, "Errors").

A loop round handles many items (jobs, provider events, outbox rows). Each item runs
inside :func:`each`; whatever it raises is classified by :func:`verdict` and handed to
the loop's own ``on_error`` for that item alone, never to its siblings or the round:

* ``RETRY``: the upstream is unreachable or busy (``UpstreamRetryable``), the store is
  unavailable or contended (:func:`gateway.store.engine.errors.transient`), or an unexpected
  exception (a bug that may pass). The loop releases the item's lease with a backoff and
  counts the attempt; past its attempt limit the item ends.
* ``END``: a value the store refuses (:func:`gateway.store.engine.errors.refused`), a contract
  violation or any other deliberate :class:`contracts.errors.CutoverError`: retrying
  cannot help, so the item ends (logged with its prediction id).

Only a refusal may turn a provider's ``succeeded`` into ``failed`` (the finalizer's rule).
:class:`Outage` is the round-level half: a loop whose whole round fails (the store is
down) logs the first failure with its traceback, backs off, and logs the recovery once.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from contracts.errors import CutoverError, ServiceUnavailable, UpstreamRetryable
from gateway.store.engine import errors as store_errors

__all__ = ["MAX_ATTEMPTS", "Outage", "Verdict", "each", "retry_store", "verdict"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_ATTEMPTS = 8
"""Tries of one item (a submit, a provider event) before it ends (docs/lifecycle.md)."""


class Verdict(enum.StrEnum):
    """What the loop should do with an item whose handling raised."""

    RETRY = "retry"
    END = "end"


def verdict(exc: BaseException) -> Verdict:
    """Classify an item's exception (see the module docstring)."""
    if isinstance(exc, UpstreamRetryable | ServiceUnavailable):
        return Verdict.RETRY
    if store_errors.refused(exc):
        return Verdict.END
    if store_errors.transient(exc):
        return Verdict.RETRY
    if isinstance(exc, CutoverError):
        return Verdict.END
    return Verdict.RETRY


def describe(exc: BaseException) -> str:
    """A one-line cause for logs and stored errors (no traceback, no payload)."""
    detail = exc.detail if isinstance(exc, CutoverError) else str(exc).split("\n", 1)[0]
    return f"{type(exc).__name__}: {detail[:300]}"


async def each(
    items: Iterable[T],
    handle: Callable[[T], Awaitable[object]],
    on_error: Callable[[T, BaseException, Verdict], Awaitable[object]],
) -> None:
    """Run ``handle(item)`` for every item concurrently; an item's exception goes to
    ``on_error(item, exc, verdict)`` and no further. ``CancelledError`` passes through."""

    async def one(item: T) -> None:
        try:
            await handle(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (the item's boundary: classified below)
            try:
                await on_error(item, exc, verdict(exc))
            except asyncio.CancelledError:
                raise
            except Exception as again:  # noqa: BLE001 (the release failed too: lease expires)
                log.warning("item_error_unhandled", extra={"error": describe(again)})

    await asyncio.gather(*(one(item) for item in items))


async def retry_store(
    operation: Callable[[], Awaitable[T]], *, attempts: int = 4, base_s: float = 0.05
) -> T:
    """Run a store ``operation`` again (short backoff) while it fails transiently.

    For writes that record what an upstream already did (a submit, a webhook sent), so
    a blip in the store does not make the gateway do it twice.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except Exception as exc:
            if attempt == attempts or not store_errors.transient(exc):
                raise
            await asyncio.sleep(random.uniform(0, base_s * 2**attempt))  # noqa: S311
    raise AssertionError("unreachable")


class Outage:
    """Round-level failures of one loop: logged once per outage, with backoff.

    Parameters
    ----------
    loop : str
        The loop's name, for logs.
    interval_s : float
        The loop's idle interval; the first backoff.
    max_s : float
        The longest wait between failing rounds, in seconds.
    """

    def __init__(self, loop: str, interval_s: float, max_s: float = 10.0) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._max_s = max(max_s, interval_s)
        self.failures = 0

    def failed(self, exc: BaseException) -> float:
        """Record a failed round; return how long to wait before the next one."""
        self.failures += 1
        if self.failures == 1:
            log.error("loop_round_failed", exc_info=exc, extra={"loop": self._loop})
        else:
            log.debug("loop_round_failed_again", extra={"loop": self._loop, "error": describe(exc)})
        return min(self._max_s, self._interval_s * 2 ** min(self.failures, 16))

    def succeeded(self) -> None:
        """Record a round that worked; logs the end of an outage once."""
        if self.failures:
            log.warning(
                "loop_recovered", extra={"loop": self._loop, "failed_rounds": self.failures}
            )
        self.failures = 0
