"""An event loop in a thread, for the fake servers of a synchronous test (the replicate
client is synchronous; the fakes are aiohttp apps)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["BackgroundLoop"]


class BackgroundLoop:
    """An event loop running in a daemon thread; :meth:`run` waits for a coroutine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
