"""The chaos run at a reduced size, on each backend; and its deliberately broken promise.

Full size (docs/reliability.md): ``cutover chaos --predictions 1000``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import run as chaos_run
from chaos.profile import FaultProfile
from tests.support.databases import database_url_for

pytestmark = pytest.mark.timeout(240)

#: The default profile's faults, with shorter tails so a reduced run stays short.
QUICK = FaultProfile(
    cancel_after_min_s=5.0, cancel_after_max_s=6.0, slow_run_max_s=8.0, cancel_grace_s=4.0,
    webhook_late_max_s=2.0, receiver_failing_s=1.5, terminal_within_s=60.0,
)


async def test_chaos_run_keeps_every_promise(backend: str, tmp_path: Path):
    async with database_url_for(backend, tmp_path) as url:
        report = await chaos_run.run(chaos_run.Options(
            workdir=tmp_path / "run", predictions=60, profile=QUICK, database_url=url, seed=11,
        ))
    print(report.text())
    assert report.violations == [], report.text()
    assert report.predictions == 60
    assert sum(report.faults.values()) > 30  # the profile's faults were injected
    assert report.plans["replicate_client"] > 0


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
