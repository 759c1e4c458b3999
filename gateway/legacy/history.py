"""``cutover import``: the legacy provider's finished predictions into the store
(docs/cutover-day.md, "Importing history").

The legacy provider's ``GET /v1/predictions`` is read page by page, newest first, until a
prediction is older than ``since`` (or ``limit`` were imported). Each finished one the
store does not hold yet is stored as an adopted prediction (same id, its input, output,
times, the upstream object kept), its output files copied into owned storage while the
upstream still has them; one whose files are gone is stored ``data_removed`` with no
output. Active ones are left for adoption on first sight. Running it again adds nothing
(ids already stored are skipped before any file is fetched), so an interrupted import is
resumed by running it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from adapters.replicate import snapshot_of
from contracts.errors import ContractViolation
from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.files.outputs import AssetError, OutputCopier
from gateway.legacy.adoption import adopted_row, upstream_time
from gateway.store.adoptions import existing_ids, insert_adopted
from gateway.store.engine.aio import Engine
from gateway.store.records import AssetRecord

__all__ = ["ImportSummary", "PredictionLister", "import_history"]

log = logging.getLogger(__name__)


class PredictionLister(Protocol):
    """The legacy provider's prediction list (adapters/replicate.py ``list_page``)."""

    async def list_page(
        self, url: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]: ...


@dataclass
class ImportSummary:
    """What an import saw and did; ``imported`` counts new rows."""

    seen: int = 0
    imported: int = 0
    already: int = 0
    active: int = 0
    files_gone: int = 0
    unreadable: int = 0
    pages: int = 0

    def line(self) -> str:
        return (f"{self.imported} imported, {self.already} already stored, {self.active} "
                f"still running (adopted on first GET), {self.files_gone} with files gone, "
                f"{self.unreadable} unreadable; {self.seen} seen in {self.pages} pages")


async def import_history(
    *,
    provider: str,
    tenant: str,
    lister: PredictionLister,
    engine: Engine,
    copier: OutputCopier,
    file_hosts: Collection[str],
    since: datetime,
    limit: int | None = None,
    progress: Callable[[ImportSummary], None] = lambda summary: None,
    clock: Clock = SYSTEM_CLOCK,
) -> ImportSummary:
    """Import the legacy provider's finished predictions created at or after ``since``
    into ``tenant``; ``progress`` is called after each page.

    Raises ``UpstreamRetryable`` / ``ContractViolation`` when a page cannot be read
    (what was stored before stays: run it again to resume).
    """
    summary = ImportSummary()
    url: str | None = None
    while True:
        results, url = await lister.list_page(url)
        summary.pages += 1
        page, older = _within(results, since, summary)
        stored = await existing_ids(engine, [s.provider_job_id for _, s in page])
        for raw, snapshot in page:
            if limit is not None and summary.imported >= limit:
                progress(summary)
                return summary
            if snapshot.provider_job_id in stored:
                summary.already += 1
            elif not snapshot.state.terminal:
                summary.active += 1
            else:
                await _store((provider, tenant), raw, snapshot, engine, copier, file_hosts,
                             summary, clock)
        progress(summary)
        if older or url is None:
            return summary


def _within(results: Sequence[dict[str, Any]], since: datetime, summary: ImportSummary
            ) -> tuple[list[tuple[dict[str, Any], ProviderSnapshot]], bool]:
    """The page's readable predictions created at or after ``since``, and whether an
    older one was met (the list is newest first: the import ends there)."""
    page: list[tuple[dict[str, Any], ProviderSnapshot]] = []
    for raw in results:
        summary.seen += 1
        try:
            snapshot = snapshot_of(raw)
        except ContractViolation:
            summary.unreadable += 1
            continue
        created = upstream_time(raw.get("created_at"))
        if created is not None and created < since:
            return page, True
        page.append((raw, snapshot))
    return page, False


async def _store(where: tuple[str, str], raw: dict[str, Any], snapshot: ProviderSnapshot,
                 engine: Engine, copier: OutputCopier, file_hosts: Collection[str],
                 summary: ImportSummary, clock: Clock) -> None:
    now = clock.now()
    provider, tenant = where
    row = adopted_row(provider, raw, snapshot, tenant, now)
    output, records, gone = None, list[AssetRecord](), False
    if snapshot.state is JobState.COMPLETED:
        try:
            output, records = await copier.copy(snapshot.provider_job_id, snapshot.output,
                                                file_hosts)
        except AssetError as exc:  # the upstream deleted them: marked, not failed
            gone = True
            log.info("import_files_gone", extra={"job_id": row["id"], "error": exc.detail})
    completed = upstream_time(raw.get("completed_at")) or row["created_at"]
    row.update(state=snapshot.state.value, output=output, error=snapshot.error,
               logs=snapshot.logs, metrics=snapshot.metrics or None, data_removed=gone,
               completed_at=max(completed, row["created_at"]), next_attempt_at=None)
    _, inserted = await insert_adopted(engine, row, records)
    summary.imported += inserted
    summary.already += not inserted
    summary.files_gone += gone and inserted
