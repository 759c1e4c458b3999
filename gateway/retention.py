"""The retention loop (docs/retention.md): old delivered webhooks, applied provider events,
expired uploads and, when ``data_retention_s`` is set, the data of finished predictions.

Each round does at most ``batch`` items of each kind through indexed statements
(:mod:`gateway.store.retention`). A prediction's owned files are deleted from storage
before its row is cleared, so a crash in between leaves it due again, never an orphan
file; it then reports ``data_removed: true`` with ``input``, ``output`` and ``logs``
gone, as Replicate does for API predictions (docs/replicate-api.md §8.1).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.files.service import FileService
from gateway.loop import Loop
from gateway.notify import LoopName, Notifier
from gateway.storage import Storage
from gateway.store.retention import RetentionStore

__all__ = ["Retention"]

log = logging.getLogger(__name__)


class Retention(Loop):
    """Prunes old rows and data. Ages are in seconds; ``data_retention_s`` None keeps
    prediction data for ever."""

    name = LoopName.RETENTION

    def __init__(
        self,
        *,
        store: RetentionStore,
        files: FileService,
        storage: Storage,
        notifier: Notifier,
        outbox_age_s: float,
        events_age_s: float,
        data_retention_s: float | None,
        batch: int,
        interval_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._store = store
        self._files = files
        self._storage = storage
        self._outbox_age = timedelta(seconds=outbox_age_s)
        self._events_age = timedelta(seconds=events_age_s)
        self._data_age = None if data_retention_s is None else timedelta(seconds=data_retention_s)
        self._batch = batch

    async def run_once(self) -> int:
        now = self._clock.now()
        counts = {
            "outbox_rows": await self._store.prune_outbox(now - self._outbox_age, self._batch),
            "provider_events": await self._store.prune_events(
                now - self._events_age, self._batch
            ),
            "files": await self._files.prune(self._batch),
            "predictions": await self._remove_data(now) if self._data_age is not None else 0,
        }
        if any(counts.values()):
            log.info("retention_pruned", extra=counts)
        return sum(counts.values())

    async def _remove_data(self, now: datetime) -> int:
        assert self._data_age is not None
        removed = 0
        for job_id in await self._store.data_due(now - self._data_age, self._batch):
            for key in await self._store.asset_keys(job_id):
                await self._storage.delete(key)
            removed += await self._store.remove_data(job_id)
        return removed
