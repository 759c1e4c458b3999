"""The ``cutover`` console script (gateway/console.py) imports the gateway with the
collector paused, freezes what the import built and runs the command with the collector
back on; importing gateway.cli anywhere else changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import gc, sys
from gateway import console
sys.argv = ["cutover", "check", "--config", sys.argv[1]]
status = console.main()
print(status, gc.isenabled(), gc.get_freeze_count())
"""


def test_the_command_runs_with_the_collector_on_and_the_import_frozen(tmp_path: Path) -> None:
    config = tmp_path / "cutover.toml"
    config.write_text('[gateway]\napi_tokens = ["r8_test"]\n[providers.fake]\nkind = "fake"\n'
                      '[[routes]]\nmodel = "acme/echo"\nprovider = "fake"\n')
    result = subprocess.run([sys.executable, "-c", PROBE, str(config)], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    status, enabled, frozen = result.stdout.splitlines()[-1].split()  # after the summary
    assert (status, enabled) == ("0", "True"), result.stderr
    assert int(frozen) > 10_000  # the gateway's modules and what they built


def test_importing_the_cli_leaves_the_collector_alone() -> None:
    probe = "import gc; import gateway.cli; print(gc.isenabled(), gc.get_freeze_count())"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert result.stdout.split() == ["True", "0"]
