"""A start that ends as soon as the server listens: what ``bench/startup.py --instructions``
runs under callgrind, so that the instruction count covers exactly one start.

    python bench/support/listening.py gateway CONFIG   # `cutover serve --config CONFIG`,
                                                       # as the console script starts it
    python bench/support/listening.py bare BARE_SCRIPT PORT BODY   # the bare aiohttp server

When aiohttp's site has started listening the process leaves with ``os._exit(0)``: no
request is answered and nothing is torn down (interpreter shutdown would add ~5 % of
instructions that no start pays). The gateway side runs :func:`gateway.console.main`
itself, so the import is made as the ``cutover`` script makes it (collector paused).
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any


def _exit_when_listening() -> None:
    from aiohttp import web_runner

    start = web_runner.BaseSite.start

    async def start_then_exit(self: Any) -> None:
        await start(self)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    web_runner.BaseSite.start = start_then_exit  # type: ignore[method-assign]


def main() -> None:
    which, *args = sys.argv[1:]
    if which == "gateway":
        import gc

        gc.disable()  # as gateway.console imports everything (aiohttp with the gateway)
        _exit_when_listening()
        gc.enable()
        from gateway import console

        sys.argv = ["cutover", "serve", "--config", args[0]]
        sys.exit(console.main())
    _exit_when_listening()
    sys.argv = [args[0], *args[1:]]
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
