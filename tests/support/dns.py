"""A DNS server on 127.0.0.1 that the test controls, and a resolver that asks only it.

:class:`LoopbackDns` answers A/AAAA queries from a table over real UDP (dnslib's
server, in its own thread, port 0). A name may map to several answers, consumed one per
query with TTL 0: the rebinding attack, where a name is public when the gateway checks
it and internal when it connects. :class:`LoopbackResolver` implements the gateway's
``ssrf.Resolver`` seam by querying that server, never the machine's resolver.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from types import TracebackType

from dnslib import AAAA, QTYPE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSServer

__all__ = ["LoopbackDns", "LoopbackResolver"]


class _Table(BaseResolver):  # type: ignore[misc]
    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self.table = table
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def resolve(self, request: DNSRecord, handler: object) -> DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        with self._lock:
            self.queries.append(name)
            answers = self.table.get(name)
            addresses = (answers.pop(0) if len(answers) > 1 else answers[0]) if answers else []
        for address in addresses:
            ip = ipaddress.ip_address(address)
            if ip.version == 4 and request.q.qtype in (QTYPE.A, QTYPE.ANY):
                reply.add_answer(RR(name, QTYPE.A, rdata=A(address), ttl=0))
            if ip.version == 6 and request.q.qtype in (QTYPE.AAAA, QTYPE.ANY):
                reply.add_answer(RR(name, QTYPE.AAAA, rdata=AAAA(address), ttl=0))
        return reply


class LoopbackDns:
    """A UDP DNS server on 127.0.0.1 (port 0) serving ``table``; a context manager."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self._table = _Table(table)
        self._server = DNSServer(self._table, address="127.0.0.1", port=0, logger=_Quiet())

    @property
    def port(self) -> int:
        return int(self._server.server.server_address[1])

    @property
    def queries(self) -> list[str]:
        return self._table.queries

    def __enter__(self) -> LoopbackDns:
        self._server.start_thread()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.stop()
        self._server.server.server_close()


class _Quiet:
    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None


class LoopbackResolver:
    """``ssrf.Resolver`` asking only the :class:`LoopbackDns` on ``port`` (A, then AAAA)."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def resolve(self, host: str, port: int) -> list[str]:
        found: list[str] = []
        for qtype in ("A", "AAAA"):
            found += await asyncio.to_thread(self._ask, host, qtype)
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, f"loopback DNS: no such host {host!r}")
        return found

    def _ask(self, host: str, qtype: str) -> list[str]:
        query = DNSRecord.question(host, qtype).pack()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2.0)
            sock.sendto(query, ("127.0.0.1", self.port))
            data, _ = sock.recvfrom(4096)
        return [str(rr.rdata) for rr in DNSRecord.parse(data).rr if rr.rtype in (1, 28)]
