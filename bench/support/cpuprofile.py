"""Run a Python script under cProfile timed by CPU time, not wall time.

``python bench/support/cpuprofile.py OUT SCRIPT ARGS...`` runs ``SCRIPT ARGS...`` (as
``python SCRIPT ARGS...`` would) and writes its pstats to OUT when it exits. cProfile's
default timer is the wall clock, which charges the event loop's idle waits (and every
other process's turn on a loaded machine) to whatever function was running; with
``time.process_time`` a profile adds up to the process's CPU time (bench/e2e.py
``--profile``).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    profile = cProfile.Profile(time.process_time)
    try:
        profile.runcall(runpy.run_path, script, run_name="__main__")
    except SystemExit:
        pass
    finally:
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
