"""Subprocesses started by tests die with the test run, however it ends.

Servers are started in their own session (so a whole process group can be signalled),
which also means they would outlive a pytest killed by SIGTERM or SIGKILL. On Linux,
``PR_SET_PDEATHSIG`` makes the kernel send the child SIGTERM when its parent goes away.
"""

from __future__ import annotations

import ctypes
import signal
import sys

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A ``preexec_fn``: ask for SIGTERM when the parent exits (no-op off Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
