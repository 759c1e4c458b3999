"""Run the unmodified replicate JS client (tests/integration/js) from pytest.

``node_modules`` come from ``CUTOVER_JS_NODE_MODULES`` when set, else from one ``npm ci``
of tests/integration/js/package-lock.json into ``~/.cache/cutover-js-integration`` (the
package registry, once per machine; a file lock keeps parallel test workers to one
install). Without ``node`` the tests are skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

__all__ = ["run_js"]

JS_DIR = Path(__file__).resolve().parents[1] / "integration" / "js"


def _node_modules() -> Path:
    configured = os.environ.get("CUTOVER_JS_NODE_MODULES")
    if configured:
        return Path(configured)
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = home / "cutover-js-integration"
    lock = (JS_DIR / "package-lock.json").read_bytes()
    stamp = cache / "installed.lock"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".installing", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another worker's npm ci finishes first
        if not stamp.is_file() or stamp.read_bytes() != lock:
            _npm_ci(cache, lock, stamp)
    return cache / "node_modules"


def _npm_ci(cache: Path, lock: bytes, stamp: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(JS_DIR / name, cache / name)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=cache, capture_output=True, text=True,
        timeout=300,
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci failed in {cache}\n{done.stdout}\n{done.stderr}")
    stamp.write_bytes(lock)


def run_js(tmp_path: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """``node clients.mjs ARGS`` with ``env``; its JSON line as a dict."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    modules = _node_modules()
    shutil.copyfile(JS_DIR / "clients.mjs", tmp_path / "clients.mjs")
    link = tmp_path / "node_modules"
    if not link.exists():
        link.symlink_to(modules.resolve())
    done = subprocess.run(
        [node, str(tmp_path / "clients.mjs"), *args], cwd=tmp_path,
        env={**os.environ, **env}, capture_output=True, text=True, timeout=90,
    )
    if done.returncode != 0:
        pytest.fail(f"node failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])
