"""Real headless Chromium for page tests (Debian's ``chromium``; .ci/run installs it).

:func:`chromium` finds the browser; without one a test is skipped, except under CI
(``CI`` set), where a missing browser is a failure: the page test must really run there.
:mod:`tests.support.cdp` drives it.
"""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["chromium"]


def chromium() -> str:
    """The browser's path; skips the test when absent (fails it under CI)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed, and CI must run the browser tests")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")
