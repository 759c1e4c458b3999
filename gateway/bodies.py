"""The JSON of finished predictions, made once per process and kept.

A finished prediction never changes (docs/lifecycle.md: a terminal state never changes,
and nothing rewrites a finished job's row), so the bytes of its JSON, once made, are right
in every gateway process sharing the store, whichever of them finished it. GET and list
serve them from here without reading the store again.

The cache is bounded by the total size of the bodies it holds (least recently used out
first).

:class:`CurrentBodies` keeps the JSON of predictions still running, each under the row
version it was made from (``jobs.row_version``, raised by the database on every change of
the row, in any process): a GET reads that version (one small read) and serves the kept
bytes when it is the same, so the answer is made once per change, not once per poll, and
never shows a state older than the row's (docs/lifecycle.md, "Reads of a prediction").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["DEFAULT_MAX_BYTES", "CurrentBodies", "FinishedBodies"]

DEFAULT_MAX_BYTES = 32 * 2**20


class _BoundedBodies:
    """An LRU map from prediction id to ``(tag, JSON bytes)``, bounded by the bytes it
    holds (``max_bytes``; a body larger than that is not kept)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._bodies: OrderedDict[str, tuple[Hashable, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._bodies)

    def _get(self, job_id: str) -> tuple[Hashable, bytes] | None:
        kept = self._bodies.get(job_id)
        if kept is not None:
            self._bodies.move_to_end(job_id)
        return kept

    def _put(self, job_id: str, tag: Hashable, body: bytes) -> None:
        old = self._bodies.pop(job_id, None)
        if old is not None:
            self._bytes -= len(old[1])
        if len(body) > self._max_bytes:
            return
        self._bodies[job_id] = (tag, body)
        self._bytes += len(body)
        while self._bytes > self._max_bytes:
            _, (_, dropped) = self._bodies.popitem(last=False)
            self._bytes -= len(dropped)


class FinishedBodies(_BoundedBodies):
    """An LRU map from prediction id to the JSON bytes of the finished prediction.

    Parameters
    ----------
    max_bytes : int
        Upper bound of the bytes held, in bytes; a body larger than this is not kept.
    """

    def get(self, job_id: str) -> bytes | None:
        """The kept body of ``job_id``, or None."""
        kept = self._get(job_id)
        return None if kept is None else kept[1]

    def put(self, job_id: str, body: bytes) -> None:
        """Keep ``body`` as the finished prediction ``job_id``'s JSON (a finished
        prediction's body never changes: one already kept stays)."""
        if job_id not in self._bodies:
            self._put(job_id, None, body)


class CurrentBodies(_BoundedBodies):
    """An LRU map from prediction id to ``(row version, JSON bytes)`` of its state then.

    Parameters
    ----------
    max_bytes : int
        Upper bound of the bytes held, in bytes; a body larger than this is not kept.
    """

    def get(self, job_id: str, version: Hashable) -> bytes | None:
        """The body kept for ``job_id`` if it was made from row version ``version``."""
        kept = self._bodies.get(job_id)
        if kept is None or kept[0] != version:
            return None
        self._bodies.move_to_end(job_id)
        return kept[1]

    def put(self, job_id: str, version: Hashable, body: bytes) -> None:
        """Keep ``body`` as ``job_id``'s JSON at row version ``version`` (replacing an
        older one)."""
        self._put(job_id, version, body)
