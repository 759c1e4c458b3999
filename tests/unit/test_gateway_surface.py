"""``gateway/__init__.py`` names the package's public surface (docs/architecture.md, "Rules"
2) and resolves it lazily, so importing one module does not import the app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gateway_all_names_the_entry_points_and_imports_nothing_until_asked():
    script = (
        "import sys, gateway\n"
        "assert sorted(gateway.__all__) == "
        "['Settings', 'create_app', 'load_settings', 'main'], gateway.__all__\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('gateway.'))\n"
        "assert loaded == [], loaded\n"
        "from gateway.app import create_app\n"
        "from gateway.cli import main\n"
        "from gateway.config import Settings, load_settings\n"
        "assert gateway.create_app is create_app and gateway.main is main\n"
        "assert gateway.Settings is Settings and gateway.load_settings is load_settings\n"
        "try:\n"
        "    gateway.nothing_here\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
