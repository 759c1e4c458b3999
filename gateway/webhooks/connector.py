"""The SSRF guard at delivery time: an aiohttp connector that vets every address.

Names go through :class:`GuardedResolver`, which drops the addresses the
:class:`~gateway.webhooks.ssrf.WebhookTargetPolicy` refuses (DNS rebinding defence);
literal IP hosts, which aiohttp never passes to a resolver, are checked in the
connector's ``connect``. The rules themselves live in :mod:`gateway.webhooks.ssrf`.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from gateway.webhooks.ssrf import Resolver, TargetRefused, WebhookTargetPolicy, ip_literal

__all__ = ["GuardedResolver", "connector"]

_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that only returns addresses the policy allows for the host.

    Parameters
    ----------
    policy : WebhookTargetPolicy
        Decides which addresses are allowed for which host.
    resolver : Resolver, optional
        The underlying resolution; the policy's own resolver by default.

    Notes
    -----
    aiohttp only calls a resolver for host *names*: literal IP hosts skip it, which is why
    :func:`connector` also checks them in ``connect``. Use this resolver through
    :func:`connector` rather than on its own.
    """

    def __init__(self, policy: WebhookTargetPolicy, resolver: Resolver | None = None) -> None:
        self._policy = policy
        self._resolver = resolver if resolver is not None else policy.resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve ``host`` and keep the addresses the policy allows.

        Returns
        -------
        list[ResolveResult]
            The allowed addresses of the requested family (``AF_UNSPEC``: any).

        Raises
        ------
        TargetRefused
            Every address was refused by the policy.
        OSError
            Resolution failed, or no address of the requested family.
        """
        kept: list[ResolveResult] = []
        refused: list[str] = []
        for address in dict.fromkeys(await self._resolver.resolve(host, port)):
            reason = self._policy.refusal(host, address)
            if reason is not None:
                refused.append(reason)
                continue
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family in (socket.AF_UNSPEC, address_family):
                kept.append(_result(host, address, port, address_family))
        if kept:
            return kept
        if refused:
            raise TargetRefused("; ".join(refused))
        raise OSError(errno.EADDRNOTAVAIL, f"webhook host {host!r} has no usable address")

    async def close(self) -> None:
        """Nothing to release: the wrapped resolver belongs to its creator."""


def _result(host: str, address: str, port: int, family: int) -> ResolveResult:
    return ResolveResult(
        hostname=host,
        host=address,
        port=port,
        family=family,
        proto=socket.IPPROTO_TCP,
        flags=_NUMERIC_FLAGS,
    )


class _GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector that also vets IP-literal hosts and refuses proxies."""

    def __init__(self, policy: WebhookTargetPolicy, **options: Any) -> None:
        super().__init__(resolver=GuardedResolver(policy), **options)
        self._policy = policy

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> Connection:
        host = req.url.raw_host or ""
        reason: str | None = None
        if req.proxy is not None:
            reason = "webhook deliveries must not go through a proxy (the guard cannot see "
            reason += "the address the proxy connects to)"
        elif not req.is_ssl() and not self._policy.is_allowed_host(host):
            reason = f"plain http to webhook host {host!r}, which is not allow-listed"
        elif ip_literal(host) is not None:
            reason = self._policy.refusal(host, host)
        if reason is not None:
            raise aiohttp.ClientConnectorError(req.connection_key, TargetRefused(reason))
        return await super().connect(req, traces, timeout)


def connector(policy: WebhookTargetPolicy, **options: Any) -> aiohttp.TCPConnector:
    """Build the connector every webhook delivery must use.

    Every address it connects to is checked against ``policy``: names through
    :class:`GuardedResolver`, IP-literal hosts before connecting. It also refuses plain
    ``http`` to a host that is not allow-listed, and any proxied request (a
    ``ClientSession(trust_env=True)`` with ``HTTPS_PROXY`` set would otherwise let the
    proxy resolve, unguarded).

    Parameters
    ----------
    policy : WebhookTargetPolicy
        The target policy.
    **options
        Passed to ``aiohttp.TCPConnector`` (``limit``, ``limit_per_host``, ``ssl``...),
        except ``resolver``.

    Returns
    -------
    aiohttp.TCPConnector
        Must be created inside a running event loop; the caller closes it.

    Raises
    ------
    TypeError
        ``resolver`` was passed in ``options``.

    Notes
    -----
    A refused request raises ``aiohttp.ClientConnectorError`` (``ClientConnectorDNSError``
    for a name) with ``os_error`` a :class:`TargetRefused`; nothing is connected. Do not
    follow redirects (``allow_redirects=False``, docs/replicate-api.md §6.1): each hop would
    be vetted, but a redirect is not a delivery.
    """
    if "resolver" in options:
        raise TypeError("connector() builds its own resolver")
    return _GuardedConnector(policy, **options)
