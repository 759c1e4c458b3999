"""The image, checked without a Docker engine: where it listens, what its health check
probes, the lock file its build installs, and what ``cutover chaos`` needs in it
(README "Container").

The image's default listened on ``[gateway] listen``'s default, 127.0.0.1:8080, while it
EXPOSEd 8443 (the file had to say 0.0.0.0:8443); ``cutover chaos`` was not in it (no
``chaos`` package, no ``replicate`` client); and its dependencies were whatever PyPI held
on the day of the build.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.config import load_settings
from gateway.healthcheck import probe_url
from tests.unit.test_repo_files import dockerfile_stages, instructions

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_PROJECT_PACKAGES = {"contracts", "adapters", "gateway", "shadow", "chaos"}


def _runtime_env() -> dict[str, str]:
    """The runtime stage's ``ENV key=value`` pairs."""
    pairs: dict[str, str] = {}
    for args in instructions(dockerfile_stages()[-1], "ENV"):
        for token in args.replace("\\\n", " ").split():
            key, sep, value = token.partition("=")
            if sep:
                pairs[key] = value
    return pairs


def _lock() -> dict[str, str]:
    """Canonical name -> pinned version of every entry of requirements.lock, each of which
    must carry at least one hash."""
    pins: dict[str, str] = {}
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    for entry in entries:
        match = _PIN_RE.match(entry)
        if match is None:
            continue
        assert "--hash=sha256:" in entry, f"{match.group(1)} is pinned without a hash"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_the_image_listens_where_it_exposes_and_its_healthcheck_probes_there(
    monkeypatch: pytest.MonkeyPatch,
):
    runtime = dockerfile_stages()[-1]
    exposed = {port.split("/")[0] for args in instructions(runtime, "EXPOSE")
               for port in args.split()}
    env = _runtime_env()
    listen = env["CUTOVER_GATEWAY__LISTEN"]
    host, _, port = listen.rpartition(":")
    assert host == "0.0.0.0"  # reachable through the published port
    assert exposed == {port}
    # What serve and `cutover health` load in the image: the example file (which says
    # 127.0.0.1) with the image's environment, which wins.
    for key, value in env.items():
        if key.startswith("CUTOVER_") and key != "CUTOVER_CONFIG":
            monkeypatch.setenv(key, value)
    settings = load_settings(ROOT / "examples" / "cutover.example.toml")
    assert settings.gateway.listen == listen
    assert probe_url(settings.gateway) == f"https://127.0.0.1:{port}/ready"
    health = instructions(runtime, "HEALTHCHECK")[-1]
    assert 'CMD ["cutover", "health"' in health and "--listen" not in health


def test_the_build_installs_the_lock_file_with_hashes():
    builder = dockerfile_stages()[0]
    copied = " ".join(instructions(builder, "COPY"))
    assert "requirements.lock" in copied
    runs = instructions(builder, "RUN")
    locked = [run for run in runs if "-r requirements.lock" in run]
    assert locked and "--require-hashes" in locked[0]
    # The project itself goes in without resolving anything the lock did not pin.
    assert any("install --no-deps /wheels/" in run for run in runs)


def test_the_lock_pins_every_dependency_of_pyproject_and_the_chaos_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["chaos"]]
    pins = _lock()
    environment = {**default_environment(), "sys_platform": "linux", "extra": "chaos"}
    for text in wanted:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {requirement.specifier}"
        )
        for extra in requirement.extras:  # SQLAlchemy[asyncio] -> greenlet
            needs = metadata.requires(requirement.name) or []
            for extra_text in needs:
                needed = Requirement(extra_text)
                marker = needed.marker
                if marker is not None and marker.evaluate({**environment, "extra": extra}) \
                        and not marker.evaluate({**environment, "extra": ""}):
                    assert canonicalize_name(needed.name) in pins, (
                        f"{requirement.name}[{extra}] needs {needed.name}, not locked")


def _third_party_imports(package: str) -> set[str]:
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in _PROJECT_PACKAGES:
                    found.add(top)
    return found


@pytest.mark.parametrize("package", ["chaos", "gateway", "adapters", "contracts", "shadow"])
def test_what_the_image_runs_imports_only_locked_packages(package: str):
    """``cutover chaos`` (and serve) in the image: the package is copied into the build and
    every module it imports comes from a locked distribution."""
    copied = " ".join(instructions(dockerfile_stages()[0], "COPY"))
    assert f"{package} ./{package}" in copied, f"the builder does not copy {package}/"
    pins = _lock()
    providers = metadata.packages_distributions()
    for module in sorted(_third_party_imports(package)):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists & set(pins), f"{package}/ imports {module}, which requirements.lock lacks"
