"""A TCP proxy on 127.0.0.1 that a test can cut and restore (dependency outages).

The gateway is pointed at the proxy instead of the real dependency (the machine's
PostgreSQL, the fake provider), so a test takes the dependency away without touching
the server itself. :meth:`TcpProxy.cut` closes every open connection and, until
:meth:`TcpProxy.restore`, resets each new one at once: clients see the dependency gone,
fast, as when a database restarts or a network path drops. The proxy keeps its port.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["TcpProxy"]

_CHUNK = 1 << 16


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``; an async context manager."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cut_connections = 0
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._down = False

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self._close_all()
        await self._server.wait_closed()

    @property
    def down(self) -> bool:
        return self._down

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        self._down = True
        self.cut_connections += len(self._open)
        self._close_all()

    def restore(self) -> None:
        self._down = False

    def _close_all(self) -> None:
        for writer in list(self._open):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._open.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._open.update((writer, up_writer))
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)),
                 asyncio.create_task(self._pipe(up_reader, writer))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for end in (writer, up_writer):
                self._open.discard(end)
                end.transport.abort()
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(_CHUNK):
            if self._down:
                return
            writer.write(data)
            await writer.drain()
