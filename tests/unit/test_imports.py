"""Every module imports on its own, in a fresh interpreter, with warnings as errors
(STYLE.md rule 1): no import-time I/O, no hidden import cycles, no deprecations."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "adapters", "gateway", "shadow", "chaos")


def modules() -> list[str]:
    found = []
    for package in PACKAGES:
        found.append(package)
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if ".migrations.versions." not in info.name and not info.name.endswith(".env"):
                found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("name", modules())
def test_each_module_imports_alone_with_warnings_as_errors(name: str):
    # One test per module: each fresh interpreter gets the whole per-test timeout.
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", f"import {name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{name}:\n{result.stderr[-2000:]}"
