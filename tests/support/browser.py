"""Real headless Chromium for page tests (Debian's ``chromium``; .ci/run installs it).

:func:`chromium` finds the browser; without one a test is skipped, except under CI
(``CI`` set), where a missing browser is a failure: the page test must really run there.
Each call runs one short-lived browser with its own throw-away profile, no sandbox (CI
runs as root), no GPU, and a device scale factor of 1, so one CSS pixel is one pixel of
the screenshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.orphans import die_with_parent

__all__ = ["chromium", "dump_dom", "screenshot"]

_TIMEOUT_S = 120.0


def chromium() -> str:
    """The browser's path; skips the test when absent (fails it under CI)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed, and CI must run the browser tests")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def _run(url: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="cutover-chromium-") as profile:
        command = [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--force-device-scale-factor=1",
            f"--user-data-dir={profile}", *flags, url,
        ]
        result = subprocess.run(
            command, capture_output=True, timeout=_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )
    if result.returncode != 0:
        tail = result.stderr.decode(errors="replace")[-2000:]
        raise AssertionError(f"chromium exited {result.returncode}:\n{tail}")
    return result


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 3000) -> Path:
    """Render a local page and save a ``width`` x ``height`` PNG screenshot of it."""
    _run(page.resolve().as_uri(), f"--window-size={width},{height}", f"--screenshot={png}")
    assert png.exists(), "chromium wrote no screenshot"
    return png


def dump_dom(page: Path) -> str:
    """The page's DOM, serialized by the browser after loading it."""
    return _run(page.resolve().as_uri(), "--dump-dom").stdout.decode()
