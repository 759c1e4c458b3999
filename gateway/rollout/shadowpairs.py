"""Shadow pairs from the store, compared and reported with the ``shadow`` package.

Feeds :func:`shadow.compare.compare` with the two ends of each finished pair (their job
rows and the files copied to owned storage, read from there) and keeps each comparison in
the store, once (a pair's ends never change once terminal): a pair is compared the first
time it is read with both ends terminal (by the canary guard's round when its guard
judges shadow contract breaks, else by the first report), and read back from then on,
by every process. A route's report (:func:`shadow.report.build`: candidate pairs judged
against the control-vs-control baseline pairs, rendered as Markdown, JSON or one offline
HTML page) serves ``cutover shadow report`` and the admin page. The canary guard reads
the contract-break breach from here (:func:`shadow.noise.contract_breach`). See
docs/shadow.md, "How the gateway uses it".
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from contracts.errors import ContractViolation, CutoverError
from contracts.times import parse_time
from gateway.rollout import guard, shadowgate
from gateway.rollout.spec import RouteSpec
from gateway.storage import LocalStorage, Storage
from gateway.store.replays import Replay
from gateway.store.shadows import FileRow, ShadowPair, ShadowStore, StoredComparison
from shadow.outcome import Outcome, OutputFile, read_path

if TYPE_CHECKING:  # the comparison and report are imported when first used, not at start-up
    from shadow import compare as comparing
    from shadow import report as reporting

__all__ = ["GUARD_PAIRS", "REPORT_PAIRS", "ShadowComparisons", "report_since"]

GUARD_PAIRS = 200  # the newest candidate pairs the guard judges per round
REPORT_PAIRS = 1000  # the newest pairs of each kind a report aggregates


def report_since(text: str | None, name: str, now: datetime | None = None) -> datetime | None:
    """A report window's start from ``text`` (ISO 8601; None: all pairs kept).

    Raises
    ------
    ContractViolation
        ``text`` is not a time, or is after ``now`` (default: the wall clock): a window
        that has not begun holds no pair, and a report of 0 pairs would read as a verdict
        (docs/shadow.md, "The report"). The admin API answers 422, the CLI exits 1.
    """
    if not text:
        return None
    since = parse_time(text, name)
    now = now or datetime.now(UTC)
    if since > now:
        raise ContractViolation(
            f"{name} {since.isoformat()} is in the future (now "
            f"{now.isoformat(timespec='seconds')}): no pair can be in that window")
    return since


def _marked(replay: Replay) -> reporting.Replay:
    """A stored replay as its report's header shows it."""
    from shadow import report as reporting

    return reporting.Replay(
        id=replay.id, state=replay.state, since=replay.since, until=replay.until,
        inputs=replay.total, sent=replay.sent - replay.skipped, skipped=replay.skipped,
        baseline_percent=replay.baseline_percent)


class ShadowComparisons:
    """Compared shadow pairs of every route (see the module docstring).

    Parameters
    ----------
    shadows : ShadowStore
        Reads finished pairs and their files.
    storage : Storage
        Owned storage, where the pairs' output files were copied.
    public_url : str
        The gateway's base URL (output file URLs are ``{public_url}/assets/{key}``).
    """

    def __init__(self, shadows: ShadowStore, storage: Storage, *, public_url: str) -> None:
        self._shadows = shadows
        self._storage = storage
        self._public_url = public_url

    def _file(self, row: FileRow) -> OutputFile:
        return OutputFile(
            content_type=row.content_type,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            url=f"{self._public_url}/assets/{row.key}",
            path=self._storage.path(row.key) if isinstance(self._storage, LocalStorage) else None,
            key=row.key,
        )

    async def _read(self, file: OutputFile) -> bytes:
        """A file's bytes: from its local path, else from owned storage (S3)."""
        if file.path is not None or file.key is None:
            return await read_path(file)
        try:
            return b"".join([chunk async for chunk in self._storage.read(file.key)])
        except CutoverError as exc:  # compare() notes an unreadable file (an OSError)
            raise OSError(f"output file {file.key}: {exc.detail}") from exc

    async def _compare(self, route: str, pair: ShadowPair) -> StoredComparison:
        control = Outcome.from_job(pair.control, tuple(map(self._file, pair.control_files)))
        other = Outcome.from_job(pair.candidate, tuple(map(self._file, pair.candidate_files)))
        from shadow import compare as comparing  # not at start-up (docs/benchmarks.md)
        from shadow.inputs import input_excerpt

        compared = await comparing.compare(
            control, other, read=self._read, pair_id=pair.candidate.id
        )
        compared = compared.model_copy(
            update={"input_excerpt": input_excerpt(pair.control.input)})
        return StoredComparison(
            shadow_id=pair.candidate.id, primary_id=pair.control.id, route=route,
            kind=pair.kind, created_at=pair.candidate.created_at,
            comparison=compared.model_dump(mode="json"), replay_id=pair.candidate.replay_id,
        )

    async def compared(
        self, route: str, kind: str, since: datetime | None = None, limit: int = REPORT_PAIRS,
        *, replay_id: str | None = None,
    ) -> list[comparing.PairComparison]:
        """The route's newest finished pairs of ``kind`` (``shadow`` or ``baseline``),
        compared: pairs finished since the last call are compared and kept first. Live
        traffic's pairs, or (``replay_id``) one replay's (docs/cutover-day.md)."""
        fresh = await self._shadows.pairs(route, since, limit, kind=kind, uncompared=True,
                                          replay_id=replay_id)
        if fresh:
            await self._shadows.save_comparisons([await self._compare(route, p) for p in fresh])
        kept = await self._shadows.comparisons(route, since, limit, kind=kind,
                                               replay_id=replay_id)
        from shadow import compare as comparing  # not at start-up (docs/benchmarks.md)

        return [comparing.PairComparison.model_validate(c.comparison) for c in kept]

    async def pair_stats(self, route: str, spec: RouteSpec, since: datetime) -> guard.PairStats:
        """Candidate pairs since ``since``, their contract breaks, and the breach sentence
        against the guard's ``max_contract_break_rate`` (for :mod:`gateway.rollout.guardloop`)."""
        found = await self.compared(route, "shadow", since, GUARD_PAIRS)
        from shadow import noise  # not at start-up (docs/benchmarks.md)

        thresholds = spec.shadow_thresholds
        if spec.guard is not None and spec.guard.max_contract_break_rate is not None:
            thresholds = thresholds.model_copy(
                update={"max_contract_break_rate": spec.guard.max_contract_break_rate}
            )
        return guard.PairStats(
            pairs=len(found),
            breaks=sum(p.is_contract_break for p in found),
            breach=noise.contract_breach(found, thresholds) if found else None,
        )

    async def report(
        self,
        route: str,
        spec: RouteSpec,
        *,
        since: datetime | None = None,
        fmt: reporting.Format = "md",
        replay: Replay | None = None,
    ) -> str:
        """The route's shadow-diff report in ``fmt`` (``md``, ``json`` or ``html``): of
        live traffic, or of ``replay``'s pairs alone, marked as that replay (its id,
        window and counts in the title and header: docs/cutover-day.md)."""
        from shadow import report as reporting  # not at start-up (docs/benchmarks.md)

        replay_id = replay.id if replay is not None else None
        candidates = await self.compared(route, "shadow", since, replay_id=replay_id)
        baseline = await self.compared(route, "baseline", since, replay_id=replay_id)
        made, errors = await self._shadows.tally(route, since, replay_id=replay_id)
        skipped: Counter[str] = Counter()
        for (state, error), n in errors.items():
            reason = shadowgate.skip_of(state, error)
            if reason is not None:  # a shadow canceled with its primary is no skip
                skipped[reason] += n
        built = reporting.build(route, candidates, baseline, spec.shadow_thresholds,
                                since=since, has_candidate=spec.candidate is not None,
                                coverage=reporting.Coverage(shadowed=made, skipped=dict(skipped)),
                                replay=None if replay is None else _marked(replay))
        if fmt == "html":  # thumbnails as data: URIs, so the page works offline
            built = await reporting.with_previews(built)
        return reporting.render(built, fmt)
