"""The chaos run at a reduced size, on each backend; and its deliberately broken promise.

Full size (docs/reliability.md): ``cutover chaos --predictions 1000``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import run as chaos_run
from chaos.profile import FaultProfile
from chaos.report import Report
from tests.support.databases import BACKENDS, run_sync, sync_database

pytestmark = pytest.mark.timeout(240)

#: The default profile's faults, with shorter tails so a reduced run stays short.
QUICK = FaultProfile(
    cancel_after_min_s=5.0, cancel_after_max_s=6.0, slow_run_max_s=8.0, cancel_grace_s=4.0,
    webhook_late_max_s=2.0, receiver_failing_s=1.5, terminal_within_s=60.0,
)


@pytest.fixture(scope="module", params=BACKENDS)
def chaos_report(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Report]:
    """One reduced chaos run per backend, shared by the checks below."""
    workdir = tmp_path_factory.mktemp(f"chaos-{request.param}")
    with sync_database(request.param, workdir) as url:
        options = chaos_run.Options(
            workdir=workdir / "run", predictions=60, profile=QUICK, database_url=url, seed=11,
        )
        yield run_sync(chaos_run.run(options))


def test_chaos_run_keeps_every_promise(chaos_report: Report):
    assert chaos_report.violations == [], chaos_report.text()
    assert chaos_report.predictions == 60
    assert sum(chaos_report.faults.values()) > 30  # the profile's faults were injected
    assert chaos_report.plans["replicate_client"] > 0
    assert set(chaos_report.statuses) <= {"succeeded", "failed", "canceled"}


def test_no_secret_in_any_log_line_of_the_chaos_run(chaos_report: Report):
    logs = list(Path(chaos_report.workdir).glob("gateway-*.log"))
    assert logs and sum(len(p.read_text().splitlines()) for p in logs) > 60
    leaks = [v for v in chaos_report.violations if v.promise == "no secrets in logs"]
    assert leaks == []


def test_a_broken_promise_exits_non_zero_naming_the_prediction(tmp_path: Path):
    command = [
        sys.executable, "-m", "gateway.cli", "chaos", "--predictions", "12", "--seed", "5",
        "--workdir", str(tmp_path), "--break-invariant",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = re.findall(r"^  ([a-z0-9]{26})  owned output: .*$", done.stdout, re.M)
    assert len(lines) == 1, done.stdout
    assert "1 VIOLATIONS" in done.stdout


def test_an_invalid_profile_is_refused(tmp_path: Path):
    profile = tmp_path / "p.toml"
    profile.write_text("webhook_lost_ratio = 2\ntypo_ratio = 0.1\n")
    command = [sys.executable, "-m", "gateway.cli", "chaos", "--profile", str(profile)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "webhook_lost_ratio" in done.stderr and "typo_ratio" in done.stderr
