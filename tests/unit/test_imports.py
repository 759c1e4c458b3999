"""Every module imports on its own, with warnings as errors (STYLE.md rule 1): no
import-time I/O, no hidden import cycles, no deprecations.

One interpreter (``python -W error``, tests/support/import_alone.py) imports each module in
a forked child that holds none of the project's modules, so each import is a fresh one;
the interpreter runs once per test module and each module's result is its own test.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.orphans import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "adapters", "gateway", "shadow", "chaos")
SCRIPT = ROOT / "tests" / "support" / "import_alone.py"
#: The one interpreter imports about 170 modules: under a minute on a quiet 2-core machine,
#: over ten on one loaded 8 times over. Its module fixture counts against the first test.
pytestmark = pytest.mark.timeout(1800)


def modules() -> list[str]:
    found = []
    for package in PACKAGES:
        found.append(package)
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if ".migrations.versions." not in info.name and not info.name.endswith(".env"):
                found.append(info.name)
    return sorted(found)


CHECKS = [*modules(), *(f"all:{package}" for package in PACKAGES), "lazy:shadow"]


def import_alone(names: list[str]) -> dict[str, str]:
    """Each name's error (``""``: none) from one ``python -W error`` interpreter."""
    result = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), *names],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=1500,
        preexec_fn=die_with_parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answers: dict[str, str] = json.loads(result.stdout)
    return answers


@pytest.fixture(scope="module")
def imported() -> dict[str, str]:
    return import_alone(CHECKS)


def test_no_third_party_module_warns_when_imported(imported: dict[str, str]):
    assert imported.get("<third-party>", "") == ""


@pytest.mark.parametrize("name", modules())
def test_each_module_imports_alone_with_warnings_as_errors(name: str, imported: dict[str, str]):
    assert imported[name] == "", f"{name}:\n{imported[name]}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_a_package_all_resolves(package: str, imported: dict[str, str]):
    # STYLE.md rule 2: __all__ is the package's public surface, so each name it lists must
    # be there (``from package import *`` and ``package.name`` work), on a fresh import.
    assert imported[f"all:{package}"] == "", imported[f"all:{package}"]


def test_importing_shadow_imports_none_of_its_comparison_modules(imported: dict[str, str]):
    # The gateway's start-up reads route settings only (docs/benchmarks.md): the package
    # resolves its public modules on first use, not when it is imported.
    assert imported["lazy:shadow"] == "", imported["lazy:shadow"]


PROBES = {
    "raises": {"raises.py": "import contracts.no_such_module\n"},
    "warns": {"warns.py": "import warnings\nwarnings.warn('old', DeprecationWarning)\n"},
    # a cycle that only an import alone finds: ``a`` fails unless ``b`` was imported first
    "cycle": {"a.py": "from probe import b\nX = 1\n", "b.py": "from probe.a import X\n"},
}


@pytest.mark.parametrize("kind", PROBES)
def test_a_module_that_fails_alone_is_named(kind: str, tmp_path: Path):
    # The check can fail: each probe module fails its own fresh import (with warnings as
    # errors), the modules imported before it notwithstanding.
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    for file, source in PROBES[kind].items():
        (tmp_path / "probe" / file).write_text(source)
    failing = "probe.a" if kind == "cycle" else f"probe.{kind}"
    result = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "probe", "probe.b", failing]
        if kind == "cycle" else [sys.executable, "-W", "error", str(SCRIPT), "probe", failing],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
    )
    answers = json.loads(result.stdout)
    assert answers["probe"] == ""
    assert answers[failing] != "", answers
    assert answers.get("probe.b", "") == ""


def test_the_third_party_libraries_are_imported_before_the_children_fork(tmp_path: Path):
    # The libraries the named modules pull in are learnt in one throwaway child, then
    # imported by the interpreter itself before it forks, so no module's child imports
    # them again (it did once: then each child paid for aiohttp, SQLAlchemy and the rest).
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    for name in ("one", "two", "three"):
        (tmp_path / "probe" / f"{name}.py").write_text("import countedlib\n")
    (tmp_path / "countedlib.py").write_text(
        "import os\nwith open(os.environ['COUNTED'], 'a') as f:\n    f.write('x')\n")
    counted = tmp_path / "imports.txt"
    result = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "probe", "probe.one", "probe.two",
         "probe.three"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "COUNTED": str(counted)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(json.loads(result.stdout).values()) == {""}
    assert counted.read_text() == "xx"  # the learning child, the interpreter: no child
