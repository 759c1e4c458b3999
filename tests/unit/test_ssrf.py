"""gateway.ssrf: webhook targets are checked at create time and again at delivery time.

Every resolver here is a stub, and the only sockets opened are on 127.0.0.0/8.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from contracts import errors
from gateway.webhooks import connector, ssrf

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"


class StubResolver:
    """Answers from a table; each host may have a sequence of answers (DNS rebinding)."""

    def __init__(self, answers: dict[str, list[str] | list[list[str]]]) -> None:
        self._answers: dict[str, list[list[str]]] = {
            host: (value if value and isinstance(value[0], list) else [value])  # type: ignore[misc]
            for host, value in answers.items()
        }
        self.calls: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        if host not in self._answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answers = self._answers[host]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def policy(
    allow: Iterable[str] = (), answers: dict[str, Any] | None = None
) -> ssrf.WebhookTargetPolicy:
    return ssrf.WebhookTargetPolicy(allow, resolver=StubResolver(answers or {}))


def no_socket(addr_info: Any) -> socket.socket:
    """A socket_factory proving that a refused request never opens a socket."""
    raise AssertionError(f"tried to open a socket for {addr_info!r}")


# --- create time: check_url ------------------------------------------------------------


async def test_https_public_host_is_accepted_without_connecting() -> None:
    resolver = StubResolver({"hooks.example.com": [PUBLIC_V4, PUBLIC_V6]})
    guard = ssrf.WebhookTargetPolicy([], resolver=resolver)
    await guard.check_url("https://hooks.example.com/replicate?customId=123")
    assert resolver.calls == [("hooks.example.com", 443)]


async def test_http_to_a_host_not_allow_listed_is_refused() -> None:
    guard = policy(answers={"hooks.example.com": [PUBLIC_V4]})
    with pytest.raises(errors.ContractViolation, match="https"):
        await guard.check_url("http://hooks.example.com/hook")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.2/",
        "http://localhost/",
        "https://127.0.0.2/",
        "https://localhost:8443/",
        "http://127.0.0.1.nip.io/",
        "https://[::1]/",
    ],
)
async def test_only_the_allow_listed_loopback_literal_passes(url: str) -> None:
    guard = policy(["127.0.0.1"], {"localhost": ["127.0.0.1", "::1"]})
    await guard.check_url("http://127.0.0.1:8123/hook")
    await guard.check_url("https://127.0.0.1/hook")
    with pytest.raises(errors.ContractViolation):
        await guard.check_url(url)


async def test_allow_listed_names_are_exact_and_case_insensitive() -> None:
    resolver = StubResolver({})
    guard = ssrf.WebhookTargetPolicy(["Hooks.Internal."], resolver=resolver)
    await guard.check_url("http://HOOKS.internal:9000/x")
    await guard.check_url("http://hooks.internal./x")
    assert resolver.calls == []  # allow-listed: no resolution needed
    with pytest.raises(errors.ContractViolation):
        await guard.check_url("http://a.hooks.internal/x")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://[fd00:ec2::254]/", "private"),
        ("https://[fe80::1]/", "link-local"),
        ("https://10.0.0.1/", "private"),
        ("https://172.16.5.4/", "private"),
        ("https://192.168.1.1/", "private"),
        ("https://100.64.0.1/", "CGNAT"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://[::]/", "unspecified"),
        ("https://224.0.0.1/", "multicast"),
        ("https://240.0.0.1/", "reserved"),
        ("https://[::ffff:127.0.0.1]/", "IPv4-mapped loopback"),
        ("https://[::ffff:169.254.169.254]/", "IPv4-mapped link-local"),
        ("https://[64:ff9b::a9fe:a9fe]/", "NAT64 link-local"),
        ("https://[64:ff9b::a00:1]/", "NAT64 private"),
        ("https://[2002:7f00:1::1]/", "6to4 loopback"),
    ],
)
async def test_non_public_ip_literals_are_refused(url: str, reason: str) -> None:
    with pytest.raises(errors.ContractViolation, match=reason):
        await policy().check_url(url)


async def test_nat64_and_mapped_forms_of_public_addresses_pass() -> None:
    guard = policy()
    await guard.check_url("https://[64:ff9b::808:808]/")  # DNS64 for 8.8.8.8
    await guard.check_url("https://[::ffff:8.8.8.8]/")
    await guard.check_url(f"https://{PUBLIC_V4}/")


@pytest.mark.parametrize(
    "answer", [["10.0.0.5"], ["169.254.169.254"], [PUBLIC_V4, "127.0.0.1"], ["fd00:ec2::254"]]
)
async def test_a_name_resolving_to_any_private_address_is_refused(answer: list[str]) -> None:
    guard = policy(answers={"evil.example": answer})
    with pytest.raises(errors.ContractViolation, match=r"evil\.example"):
        await guard.check_url("https://evil.example/hook")


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("https://user:pass@hooks.example.com/", "credentials"),
        ("https://user@hooks.example.com/", "credentials"),
        ("https:///path-only", "no host"),
        ("/relative/hook", "https"),
        ("ftp://hooks.example.com/", "https"),
        ("javascript:alert(1)", "https"),
        ("https://hooks.example.com:99999/", "not a valid URL"),
        ("https://2130706433/", "canonical"),
        ("https://127.1/", "canonical"),
        ("https://0x7f.0.0.1/", "canonical"),
        ("https://unknown.example/", "could not be resolved"),
    ],
)
async def test_malformed_urls_are_refused(url: str, match: str) -> None:
    guard = policy(answers={"hooks.example.com": [PUBLIC_V4]})
    with pytest.raises(errors.ContractViolation, match=match):
        await guard.check_url(url)


class UnencodableResolver:
    """Fails as ``getaddrinfo`` does on a name IDNA cannot encode (``a..b``)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        return [str(host.encode("idna"))]


@pytest.mark.parametrize("host", ["a..b", "a" * 64 + ".example"])
async def test_a_host_name_that_cannot_be_encoded_is_a_contract_violation(host: str) -> None:
    guard = ssrf.WebhookTargetPolicy([], resolver=UnencodableResolver())
    with pytest.raises(errors.ContractViolation, match=f"'{host}' is not a valid host name"):
        await guard.check_url(f"https://{host}/hook")


async def test_cidr_entries_allow_literal_addresses_in_range_only() -> None:
    guard = policy(["10.1.0.0/16", "[fd12::1]"], {"inside.example": ["10.1.2.3"]})
    await guard.check_url("http://10.1.2.3:8080/hook")
    await guard.check_url("http://[fd12::1]/hook")
    for url in ("http://10.2.0.1/", "https://10.2.0.1/", "https://inside.example/"):
        with pytest.raises(errors.ContractViolation):
            await guard.check_url(url)


@pytest.mark.parametrize("entry", ["", "  ", "10.1.0.5/16", "10.0.0.0/33", "bad host!", "h:80"])
def test_bad_allow_list_entries_are_configuration_errors(entry: str) -> None:
    with pytest.raises(errors.ConfigurationError):
        ssrf.WebhookTargetPolicy([entry])


def test_check_address_is_the_delivery_time_primitive() -> None:
    guard = policy(["127.0.0.1", "hooks.internal"])
    guard.check_address("hooks.example.com", PUBLIC_V4)
    guard.check_address("127.0.0.1", "127.0.0.1")
    guard.check_address("hooks.internal", "10.9.8.7")
    for host, address in [("hooks.example.com", "127.0.0.1"), ("127.0.0.2", "127.0.0.2")]:
        with pytest.raises(errors.ContractViolation, match="loopback"):
            guard.check_address(host, address)
    with pytest.raises(errors.ContractViolation, match="not an IP address"):
        guard.check_address("hooks.example.com", "not-an-ip")


# --- address classification agrees with the ipaddress module -----------------------------

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")


def _flagged(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or not ip.is_global
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
        or ip in _CGNAT
    )


def _expected_blocked(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _flagged(ip.ipv4_mapped)
        if ip in ipaddress.IPv6Network("64:ff9b::/96"):
            return _flagged(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip in ipaddress.IPv6Network("64:ff9b:1::/48"):
            return True
        if ip.sixtofour is not None:
            return _flagged(ip.sixtofour)
    return _flagged(ip)


@given(ip=st.ip_addresses())
def test_classification_matches_ipaddress_flags(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    reason = ssrf.blocked_reason(str(ip))
    assert (reason is not None) == _expected_blocked(ip)
    assert ssrf.blocked_reason(ip) == reason


@given(ip=st.ip_addresses(v=4))
def test_embedded_ipv4_forms_share_the_verdict(ip: ipaddress.IPv4Address) -> None:
    verdict = ssrf.blocked_reason(ip) is None
    mapped = ipaddress.IPv6Address(f"::ffff:{ip}")
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(ip))
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(ip) << 80) | 1)
    for wrapped in (mapped, nat64, sixtofour):
        assert (ssrf.blocked_reason(wrapped) is None) == verdict


@given(
    ip=st.one_of(
        *(
            st.ip_addresses(network=net)
            for net in (
                "127.0.0.0/8",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "169.254.0.0/16",
                "100.64.0.0/10",
                "0.0.0.0/8",
                "224.0.0.0/4",
                "240.0.0.0/4",
                "::1/128",
                "fc00::/7",
                "fe80::/10",
                "ff00::/8",
                "fec0::/10",
                "64:ff9b:1::/48",
            )
        )
    )
)
def test_every_internal_range_is_refused(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    assert ssrf.blocked_reason(ip) is not None


# --- delivery time: GuardedResolver and connector ---------------------------------------


async def test_guarded_resolver_keeps_only_allowed_addresses() -> None:
    guard = policy(answers={"mixed.example": ["127.0.0.2", PUBLIC_V4, "10.0.0.1", PUBLIC_V6]})
    resolver = connector.GuardedResolver(guard)
    results = await resolver.resolve("mixed.example", 443, family=socket.AF_UNSPEC)
    assert [r["host"] for r in results] == [PUBLIC_V4, PUBLIC_V6]
    assert [r["family"] for r in results] == [socket.AF_INET, socket.AF_INET6]
    assert all(r["port"] == 443 and r["hostname"] == "mixed.example" for r in results)
    only_v6 = await resolver.resolve("mixed.example", 443, family=socket.AF_INET6)
    assert [r["host"] for r in only_v6] == [PUBLIC_V6]
    await resolver.close()


async def test_guarded_resolver_refuses_when_nothing_is_left() -> None:
    guard = policy(["hooks.internal"], {"evil.example": ["127.0.0.2"], "hooks.internal": ["::1"]})
    resolver = connector.GuardedResolver(guard)
    with pytest.raises(ssrf.TargetRefused, match=r"127\.0\.0\.2 \(loopback\)"):
        await resolver.resolve("evil.example", 443, family=socket.AF_UNSPEC)
    kept = await resolver.resolve("hooks.internal", 80, family=socket.AF_UNSPEC)
    assert [r["host"] for r in kept] == ["::1"]  # allow-listed names keep their addresses
    with pytest.raises(OSError, match="no usable address") as caught:
        await resolver.resolve("hooks.internal", 80, family=socket.AF_INET)
    assert not isinstance(caught.value, ssrf.TargetRefused)


@pytest.fixture
async def loopback_listener() -> AsyncIterator[tuple[int, list[object]]]:
    """A raw TCP listener on 127.0.0.2 that records every connection it accepts."""
    accepted: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.2", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, accepted
    server.close()
    await server.wait_closed()


async def test_dns_rebinding_is_refused_at_delivery(
    loopback_listener: tuple[int, list[object]],
) -> None:
    port, accepted = loopback_listener
    resolver = StubResolver({"rebind.example": [[PUBLIC_V4], ["127.0.0.2"]]})
    guard = ssrf.WebhookTargetPolicy([], resolver=resolver)
    url = f"https://rebind.example:{port}/hook"
    await guard.check_url(url)  # create time: the name looked public

    async with aiohttp.ClientSession(
        connector=connector.connector(guard, socket_factory=no_socket)
    ) as s:
        with pytest.raises(aiohttp.ClientConnectorDNSError) as caught:
            await s.post(url, data=b"{}", allow_redirects=False)
    assert isinstance(caught.value.os_error, ssrf.TargetRefused)
    assert "127.0.0.2 (loopback)" in str(caught.value.os_error)
    assert resolver.calls == [("rebind.example", port), ("rebind.example", port)]
    assert accepted == []


@pytest.mark.parametrize(
    ("url", "kwargs", "match"),
    [
        ("https://127.0.0.2:{port}/hook", {}, "loopback"),
        ("http://127.0.0.2:{port}/hook", {}, "plain http"),
        ("https://[::ffff:127.0.0.2]:{port}/hook", {}, "IPv4-mapped loopback"),
        ("https://hooks.example.com:{port}/hook", {"proxy": "http://127.0.0.2:{port}"}, "proxy"),
        ("http://hooks.example.com:{port}/hook", {}, "plain http"),
    ],
)
async def test_connector_vets_what_the_resolver_never_sees(
    loopback_listener: tuple[int, list[object]], url: str, kwargs: dict[str, str], match: str
) -> None:
    port, accepted = loopback_listener
    guard = policy(["127.0.0.1"], {"hooks.example.com": [PUBLIC_V4]})
    options = {key: value.format(port=port) for key, value in kwargs.items()}
    async with aiohttp.ClientSession(
        connector=connector.connector(guard, socket_factory=no_socket)
    ) as s:
        with pytest.raises(aiohttp.ClientConnectorError) as caught:
            await s.post(url.format(port=port), data=b"{}", allow_redirects=False, **options)
    assert isinstance(caught.value.os_error, ssrf.TargetRefused)
    assert match in str(caught.value.os_error)
    assert accepted == []


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A webhook receiver: an aiohttp app on 127.0.0.1, port 0."""
    bodies: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield port, bodies
    await runner.cleanup()


async def test_allow_listed_loopback_literal_is_delivered(
    receiver: tuple[int, list[bytes]],
) -> None:
    port, bodies = receiver
    guard = policy(["127.0.0.1"])
    url = f"http://127.0.0.1:{port}/hook"
    await guard.check_url(url)
    async with aiohttp.ClientSession(connector=connector.connector(guard)) as session:
        async with session.post(url, data=b'{"id":"p1"}', allow_redirects=False) as response:
            assert response.status == 204
    assert bodies == [b'{"id":"p1"}']


async def test_allow_listed_name_is_delivered_through_the_guarded_resolver(
    receiver: tuple[int, list[bytes]],
) -> None:
    port, bodies = receiver
    resolver = StubResolver({"hooks.internal": ["127.0.0.1"]})
    guard = ssrf.WebhookTargetPolicy(["hooks.internal"], resolver=resolver)
    url = f"http://hooks.internal:{port}/hook"
    await guard.check_url(url)
    async with aiohttp.ClientSession(connector=connector.connector(guard)) as session:
        async with session.post(url, data=b"{}", allow_redirects=False) as response:
            assert response.status == 204
    assert bodies == [b"{}"]
    assert resolver.calls == [("hooks.internal", port)]  # resolved at delivery only


async def test_connector_builds_its_own_resolver() -> None:
    with pytest.raises(TypeError):
        connector.connector(policy(), resolver=connector.GuardedResolver(policy()))


async def test_system_resolver_answers_ip_strings() -> None:
    addresses = await ssrf.SystemResolver().resolve("127.0.0.1", 80)  # numeric: no DNS query
    assert addresses == ["127.0.0.1"]
