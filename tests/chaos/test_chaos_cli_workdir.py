"""``cutover chaos`` printed "work directory /tmp/cutover-chaos-..." and then removed it
after a clean run, so the operator looked for logs that were gone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_a_clean_run_says_it_removed_the_work_directory_it_named() -> None:
    command = [sys.executable, "-m", "gateway.cli", "chaos", "--predictions", "4",
               "--seed", "3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    named = re.search(r"^  work directory   (\S+)$", done.stdout, re.M)
    assert named, done.stdout
    assert done.stdout.splitlines()[-1] == (
        f"(removed {named[1]} after a clean run; --workdir DIR keeps the logs)"
    )
    assert not Path(named[1]).exists()
