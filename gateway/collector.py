"""Python's garbage collector, set for a serving process (docs/benchmarks.md).

:func:`settle` runs once ``cutover serve`` has started: it collects, then freezes what
start-up built (modules, SQLAlchemy's and pydantic's structures, the app: about 100,000
objects that live as long as the process), so no later collection walks them again, and
has the young generation collected every :data:`YOUNG_THRESHOLD` allocations. Each create
allocates thousands of short-lived objects: with Python's defaults, collections took a
sixth of the create path's CPU, a full one about 80 ms. Only the serving process does
this: a frozen object is never collected, and tests build many apps in one process.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (Python's default:
700)."""


async def settle(app: object) -> None:
    """An ``on_startup`` callback (``app`` unused): see the module docstring."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
