"""The crash soak and the replica soak, at a reduced size (docs/reliability.md).

Crash soak: every prediction in flight at once while the gateway is SIGKILLed and
restarted at random moments, on SQLite and on PostgreSQL: nothing lost, no duplicated
completion, no output missing (the chaos checks, per prediction). Replica soak: three
gateway processes on one PostgreSQL database under the chaos profile, one of them killed
and restarted twice: the same promises, and the provider never runs more jobs at once
than its ``max_concurrency`` (counted at the fake provider).

Full size: ``cutover chaos --predictions 500 --kills 10 --profile
examples/chaos/crash-soak.toml [--database-url ...]`` and ``cutover chaos --predictions
1000 --gateways 3 --kills 2 --victim 0 --database-url postgresql+asyncpg://...``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import run as chaos_run
from chaos.report import Report
from tests.chaos.test_chaos_run import QUICK
from tests.support.databases import BACKENDS, database_url_for

pytestmark = [pytest.mark.every_backend, pytest.mark.timeout(300)]


def _assert_kept(report: Report, predictions: int, kills: int) -> None:
    print(report.text())
    assert [v.line() for v in report.violations] == []
    assert report.predictions == predictions
    assert report.faults["gateway_sigkill"] == kills
    assert set(report.statuses) <= {"succeeded", "failed", "canceled"}


async def test_crash_soak(backend: str, tmp_path: Path) -> None:
    profile = QUICK.model_copy(update={"in_flight": 100, "max_concurrency": 32})
    async with database_url_for(backend, tmp_path) as url:
        report = await chaos_run.run(chaos_run.Options(
            workdir=tmp_path / "run", predictions=100, profile=profile, database_url=url,
            kills=3, kill_gap_s=(1.0, 2.5), seed=21,
        ))
    _assert_kept(report, 100, 3)


@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected")
async def test_replica_soak(tmp_path: Path) -> None:
    profile = QUICK.model_copy(update={"max_concurrency": 8, "in_flight": 48})
    async with database_url_for("postgres", tmp_path) as url:
        report = await chaos_run.run(chaos_run.Options(
            workdir=tmp_path / "run", predictions=120, profile=profile, database_url=url,
            gateways=3, kills=2, victim=0, kill_gap_s=(2.0, 4.0), seed=31,
        ))
    _assert_kept(report, 120, 2)
    assert report.peak_concurrency <= 8
