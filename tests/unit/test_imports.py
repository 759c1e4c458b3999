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


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_a_package_all_resolves(package: str):
    # STYLE.md rule 2: __all__ is the package's public surface, so each name it lists must
    # be there (``from package import *`` and ``package.name`` work), in a fresh interpreter.
    script = (
        f"import {package} as p\n"
        "missing = [n for n in getattr(p, '__all__', []) if not hasattr(p, n)]\n"
        "assert not missing, missing\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, f"{package}:\n{result.stderr[-2000:]}"


def test_importing_shadow_imports_none_of_its_comparison_modules():
    # The gateway's start-up reads route settings only (docs/benchmarks.md): the package
    # resolves its public modules on first use, not when it is imported.
    script = (
        "import sys, shadow\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('shadow.'))\n"
        "assert loaded == [], loaded\n"
        "assert shadow.compare is sys.modules['shadow.compare']\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
