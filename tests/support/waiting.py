"""The one way tests wait for something: poll a condition under a deadline.

``await wait_until(cond)`` in async tests (the condition may be sync or async),
``wait_until_sync(cond)`` where a test runs without an event loop (the real clients).
Both return the condition's first truthy value and fail with an ``AssertionError``
naming ``what`` when the deadline passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_until", "wait_until_sync"]


async def wait_until(
    condition: Callable[[], Any],
    timeout_s: float = 10.0,
    *,
    what: str = "the condition",
    interval_s: float = 0.01,
) -> Any:
    """Poll ``condition`` every ``interval_s`` until it is truthy; return its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        await asyncio.sleep(interval_s)


def wait_until_sync(
    condition: Callable[[], Any],
    timeout_s: float = 30.0,
    *,
    what: str = "the condition",
    interval_s: float = 0.1,
) -> Any:
    """:func:`wait_until` for code without an event loop (blocks the thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(interval_s)
