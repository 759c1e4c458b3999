"""The SSRF guard for app-supplied webhook URLs.

An app names a URL and the gateway POSTs to it, from inside the operator's network. So a
webhook target is checked twice:

* at create time, :meth:`WebhookTargetPolicy.check_url` refuses a URL whose scheme, shape
  or resolved addresses are not allowed (a ``ContractViolation``, 422);
* at delivery time, the connector from :func:`gateway.webhooks.connector.connector`
  checks the address aiohttp really connects to (:mod:`gateway.webhooks.connector`).

Only addresses that are publicly routable pass, unless the URL's host is allow-listed.
The allow-list names what an app may write as the URL host: a host name (exact,
case-insensitive), an IP literal, or a CIDR range that IP-literal hosts may fall in. An
entry never vouches for a *name* that happens to resolve into it: with ``127.0.0.1``
allowed, ``http://127.0.0.1:8080/`` passes but ``http://localhost:8080/`` and
``http://127.0.0.2/`` do not. Plain ``http`` is only allowed for allow-listed hosts.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Iterable
from typing import Protocol

import yarl

from contracts import errors

__all__ = [
    "Resolver",
    "SystemResolver",
    "TargetRefused",
    "WebhookTargetPolicy",
    "blocked_reason",
    "ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


class Resolver(Protocol):
    """Turns a host name into IP addresses."""

    async def resolve(self, host: str, port: int) -> list[str]:
        """Return the IP addresses of ``host`` as strings, in preference order.

        Raises
        ------
        OSError
            Resolution failed (``socket.gaierror`` and friends).
        """
        ...


class SystemResolver:
    """The default :class:`Resolver`: the event loop's ``getaddrinfo`` (TCP, any family)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        """Resolve ``host`` with the system resolver; see :meth:`Resolver.resolve`."""
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class TargetRefused(OSError):
    """A delivery-time refusal: the address is not allowed for this webhook host.

    An ``OSError`` so that aiohttp reports it like a connection failure: a request through
    :func:`connector` raises ``aiohttp.ClientConnectorError`` (``ClientConnectorDNSError``
    when a name resolved only to refused addresses) whose ``os_error`` is this exception.
    Delivery code should treat it as permanent (dead-letter), not retry it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)


def blocked_reason(address: str | IPAddress) -> str | None:
    """Say why an address is not a public destination, or return None if it is.

    IPv4-mapped (``::ffff:a.b.c.d``), NAT64 well-known-prefix (``64:ff9b::/96``, RFC 6052)
    and 6to4 (``2002::/16``) addresses are judged by the IPv4 address they embed, so that
    ``64:ff9b::808:808`` (DNS64 for 8.8.8.8) passes and ``::ffff:127.0.0.1`` does not. The
    local-use NAT64 prefix ``64:ff9b:1::/48`` is always refused: where its IPv4 part sits
    depends on the operator's prefix length.

    Parameters
    ----------
    address : str or ipaddress.IPv4Address or ipaddress.IPv6Address
        An IP address (an IPv6 zone ``%eth0`` is accepted).

    Returns
    -------
    str or None
        A short reason (``"loopback"``, ``"link-local"``, ``"IPv4-mapped private"``...),
        or None for a publicly routable unicast address.

    Raises
    ------
    ValueError
        ``address`` is not an IP address.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL_USE:
            return "NAT64 local-use prefix"
        wrapped = _embedded_ipv4(ip)
        if wrapped is not None:
            form, inner = wrapped
            reason = blocked_reason(inner)
            return None if reason is None else f"{form} {reason}"
    return _flag_reason(ip)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address stands for, with the name of the form."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _NAT64_WELL_KNOWN:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    return None


def _flag_reason(ip: IPAddress) -> str | None:
    checks = (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared address space (CGNAT)"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
        (not ip.is_global, "not globally routable"),
    )
    return next((reason for flagged, reason in checks if flagged), None)


def ip_literal(host: str) -> IPAddress | None:
    """The address if ``host`` is an IP literal (brackets and zone allowed), else None."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _is_legacy_ipv4(host: str) -> bool:
    """True for numeric hosts ``inet_aton`` accepts but dotted-quad syntax does not.

    ``127.1``, ``2130706433`` and ``0x7f.0.0.1`` all mean 127.0.0.1 to the C library.
    """
    if ip_literal(host) is not None:
        return False
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def _normalise_name(host: str) -> str:
    return host.lower().rstrip(".")


class WebhookTargetPolicy:
    """Which webhook URLs and addresses the gateway may deliver to.

    Parameters
    ----------
    allow_hosts : Iterable[str]
        Hosts an app may target even though they are not public, and over plain
        ``http``: host names (exact match, case-insensitive, IDNA-normalised, trailing
        dot ignored), IP literals (``127.0.0.1``, ``::1`` or ``[::1]``) and CIDR ranges
        (``10.1.0.0/16``). IP entries match IP-literal URL hosts only.
    resolver : Resolver, optional
        Name resolution; :class:`SystemResolver` by default. Tests pass a stub.

    Raises
    ------
    contracts.errors.ConfigurationError
        An allow-list entry that is empty, a CIDR with host bits set, or not a valid
        host name.
    """

    def __init__(self, allow_hosts: Iterable[str], resolver: Resolver | None = None) -> None:
        self.resolver: Resolver = resolver if resolver is not None else SystemResolver()
        self._names: set[str] = set()
        self._networks: list[IPNetwork] = []
        for entry in allow_hosts:
            self._add_entry(entry)

    def _add_entry(self, entry: str) -> None:
        text = entry.strip().removeprefix("[").removesuffix("]")
        if not text:
            raise errors.ConfigurationError("empty webhook allow-list entry")
        try:
            self._networks.append(ipaddress.ip_network(text, strict=True))
            return
        except ValueError as exc:
            if "/" in text:
                raise errors.ConfigurationError(
                    f"webhook allow-list entry {entry!r} is not a valid CIDR range: {exc}"
                ) from None
        try:
            name = yarl.URL.build(scheme="https", host=text).raw_host
        except ValueError as exc:
            raise errors.ConfigurationError(
                f"webhook allow-list entry {entry!r} is not a host name: {exc}"
            ) from None
        self._names.add(_normalise_name(name or text))

    def is_allowed_host(self, host: str) -> bool:
        """True if the URL host ``host`` (as written, e.g. yarl's ``raw_host``) is allow-listed."""
        literal = ip_literal(host)
        if literal is not None:
            return any(literal in network for network in self._networks)
        return _normalise_name(host) in self._names

    def check_address(self, host: str, address: str) -> None:
        """Refuse connecting to ``address`` for the URL host ``host``.

        Call this with every address a delivery may connect to. :func:`connector` does so
        for you (resolved names in :class:`GuardedResolver`, IP-literal hosts in the
        connector's ``connect``); code that connects any other way (another HTTP
        client, a custom resolver) must call it itself, right before connecting.

        Parameters
        ----------
        host : str
            The URL host (name or IP literal), deciding the allow-list.
        address : str
            The IP address about to be connected to.

        Raises
        ------
        contracts.errors.ContractViolation
            The host is not allow-listed and the address is not public, or ``address``
            is not an IP address.
        """
        reason = self.refusal(host, address)
        if reason is not None:
            raise errors.ContractViolation(reason)

    def refusal(self, host: str, address: str) -> str | None:
        """Explain why connecting to ``address`` for URL host ``host`` is refused.

        Returns
        -------
        str or None
            The reason, ready for an error detail, or None when the connection is allowed
            (the host is allow-listed, or the address is public).
        """
        if self.is_allowed_host(host):
            return None
        try:
            reason = blocked_reason(address)
        except ValueError:
            return f"webhook host {host!r} resolved to {address!r}, which is not an IP address"
        if reason is None:
            return None
        where = f"is {address}" if ip_literal(host) is not None else f"resolves to {address}"
        return (
            f"webhook host {host!r} {where} ({reason}); only public addresses are allowed "
            "unless the host is allow-listed"
        )

    async def check_url(self, url: str) -> None:
        """Check an app-supplied webhook URL at create time (docs/replicate-api.md §6.1).

        Parameters
        ----------
        url : str
            The ``webhook`` field of a create request.

        Raises
        ------
        contracts.errors.ContractViolation
            The URL is malformed, relative or has no host; its scheme is not ``http``
            or ``https``; it is ``http`` and the host is not allow-listed; it carries
            credentials; its host is a non-canonical IPv4 form (``127.1``); or the host
            is not allow-listed and is, or resolves to, any non-public address
            (loopback, private, link-local incl. 169.254.169.254 and fd00:ec2::254,
            unspecified, multicast, reserved, CGNAT, or a mapped/NAT64/6to4 form of
            those), is not a valid host name (``a..b``), or does not resolve at all.

        Notes
        -----
        This is an early, friendly refusal. DNS can change between create and delivery,
        so deliveries must go through :func:`connector` as well.
        """
        target = _parse(url)
        host = target.raw_host or ""
        allowed = self.is_allowed_host(host)
        if target.scheme != "https" and not allowed:
            raise errors.ContractViolation(
                f"webhook URL must use https (host {host!r} is not allow-listed for http)"
            )
        if allowed:
            return
        if ip_literal(host) is not None:
            self.check_address(host, host)
            return
        for address in await self._resolve_for_check(host, target.port or 443):
            self.check_address(host, address)

    async def _resolve_for_check(self, host: str, port: int) -> list[str]:
        try:
            addresses = await self.resolver.resolve(host, port)
        except OSError as exc:
            raise errors.ContractViolation(
                f"webhook host {host!r} could not be resolved: {exc}"
            ) from exc
        except ValueError as exc:  # UnicodeError from IDNA-encoding the name, NUL, ...
            raise errors.ContractViolation(
                f"webhook host {host!r} is not a valid host name: {exc}"
            ) from exc
        if not addresses:
            raise errors.ContractViolation(f"webhook host {host!r} has no addresses")
        return addresses


def _parse(url: str) -> yarl.URL:
    """Parse as aiohttp will (yarl), and refuse what can never be a webhook target."""
    try:
        target = yarl.URL(url)
        _ = target.port  # an out-of-range port may only fail when read
    except (ValueError, TypeError) as exc:
        raise errors.ContractViolation(f"webhook URL is not a valid URL: {exc}") from None
    if target.scheme not in ("http", "https"):
        raise errors.ContractViolation("webhook URL must use https (or http when allow-listed)")
    if not target.absolute or not target.raw_host:
        raise errors.ContractViolation("webhook URL has no host")
    if target.raw_user is not None or target.raw_password is not None:
        raise errors.ContractViolation("webhook URL must not contain credentials")
    if _is_legacy_ipv4(target.raw_host):
        raise errors.ContractViolation(
            f"webhook host {target.raw_host!r} is not a canonical IPv4 address"
        )
    return target
