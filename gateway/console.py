"""The ``cutover`` console script: :func:`gateway.cli.main`, imported with the garbage
collector paused.

Importing the gateway builds about 90,000 objects that live as long as the process
(modules, classes, SQLAlchemy's and pydantic's structures) and leaves about 2,000 cyclic
ones behind; with the collector running, its ~200 collections during the import were a
sixth of the start-up's CPU, and the first collection after it walks everything again.
So the import runs with the collector off, what it built is frozen (never walked again;
the few garbage cycles among it are kept, a few hundred KiB), and the collector is back
on before any command runs (docs/benchmarks.md, "Start-up"). Only this process does
this: importing :mod:`gateway.cli` elsewhere (tests) leaves the collector alone.

``cutover health`` (the container's health check, run every 15 s) imports only
:mod:`gateway.healthcheck` and the configuration, not the gateway.

``cutover serve`` also sets ``PYDANTIC_DISABLE_PLUGINS=1`` unless the environment sets
it: pydantic otherwise looks for plugins (the ``pydantic`` entry point group) in every
installed distribution's metadata when it builds the first model, about 6 ms of each
start (docs/benchmarks.md, "Start-up: the last 10 %"). The gateway uses no pydantic
plugin; to run one under it anyway, set ``PYDANTIC_DISABLE_PLUGINS=`` (empty).
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["main"]


def main() -> int:
    """Entry point of the ``cutover`` console script; returns the exit status."""
    if sys.argv[1:2] == ["health"]:
        from gateway import healthcheck

        return healthcheck.main(sys.argv[2:])
    if sys.argv[1:2] == ["serve"]:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    collecting = gc.isenabled()
    gc.disable()
    try:
        from gateway import cli
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return cli.main()
