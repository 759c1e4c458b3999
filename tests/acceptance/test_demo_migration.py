"""`make demo-migration` runs to the end, so it cannot rot (examples/migration.py).

The script itself checks every step (the report shows the colour cast and nothing else,
each caller lands on its sticky arm at 10, 50 and 100 %, the guard rolls back after the
forced failure, every caller is back on the control) and exits 1 when one does not hold;
this runs it in a work dir of its own and reads what it printed and left behind. It takes
about two minutes on a busy machine: two real Cog servers (one restarted), the gateway
and about 90 predictions through the real ``replicate`` client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.orphans import die_with_parent

pytestmark = [pytest.mark.cog, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 540.0


def run_demo(work: Path, script: str = "migration.py") -> tuple[int, str]:
    """Run the demo ``examples/<script>``; on overrun, SIGTERM it (it stops what it
    started) and fail."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTOVER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / script), "--work", str(work)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
    ) as proc:
        try:
            output, _ = proc.communicate(timeout=RUN_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate(timeout=60)
            pytest.fail(f"the demo ran over {RUN_S:g} s:\n{output.decode()[-4000:]}")
    return proc.returncode, output.decode(errors="replace")


def _failure(output: str) -> str:
    """The demo's own lines (its steps and its ``== FAILED`` reason) before the logs'
    tails it prints after a failure: the tails alone hid which step failed."""
    said = [line for line in output.splitlines() if not line.lstrip().startswith("{")]
    return "\n".join(said[-60:]) + "\n-- the end of the output:\n" + output[-3000:]


def test_the_migration_demo_walks_every_step(tmp_path: Path):
    work = tmp_path / "work"
    status, output = run_demo(work)
    assert status == 0, _failure(output)
    assert "== demo passed" in output
    for step in ("set-shadow acme/noise 100", "# Shadow report: acme/noise",
                 "set-canary acme/noise 10", "set-canary acme/noise 50",
                 "set-canary acme/noise 100", "NOISE_FAIL=1", "guard    rollback"):
        assert step in output, step
    page = (work / "shadow-report.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') >= 2  # offline, images inline
    assert (work / "shadow-report.md").read_text().startswith("# Shadow report: acme/noise")
    guard = next(line for line in output.splitlines() if "the guard's numbers:" in line)
    numbers = json.loads(guard.split("the guard's numbers:", 1)[1])
    assert numbers["candidate"]["failed"] >= 1
    assert numbers["candidate"]["error_rate"] > 0.2
