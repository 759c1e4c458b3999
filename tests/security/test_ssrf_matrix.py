"""The SSRF matrix for app webhook URLs, through the API, with a DNS server the test runs.

Nothing is allow-listed here, so every internal address must be refused at create (422
problem+json, no row written) in whatever spelling it comes: decimal, octal and hex
IPv4, IPv6, IPv4-mapped and NAT64 IPv6, link-local and cloud metadata addresses, and
userinfo that dresses an internal host up as a public one. Names resolve through a real
UDP DNS server on 127.0.0.1 (tests/support/dns.py); one of them answers a public address
when the gateway checks it and loopback when it connects (DNS rebinding).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from aiohttp.test_utils import TestClient

from contracts.job import JobState
from gateway.app import WEBHOOK_POLICY, create_app
from gateway.store.schema import jobs
from gateway.webhooks import ssrf
from tests.support.dns import LoopbackDns, LoopbackResolver
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import observe, outbox_rows, start_job
from tests.support.receiver import Receiver

PUBLIC = "93.184.215.14"  # handed out by the test's DNS; never dialled

REFUSED = {
    "decimal loopback": "https://2130706433/hook",
    "octal loopback": "https://0177.0.0.1/hook",
    "octal loopback, one number": "https://017700000001/hook",
    "hex loopback": "https://0x7f000001/hook",
    "hex loopback, dotted": "https://0x7f.0x0.0x0.0x1/hook",
    "short loopback": "https://127.1/hook",
    "zero address": "https://0.0.0.0/hook",
    "decimal metadata": "https://2852039166/latest/meta-data/",
    "IPv6 loopback": "https://[::1]/hook",
    "IPv6 loopback, long": "https://[0:0:0:0:0:0:0:1]/hook",
    "IPv6 unspecified": "https://[::]/hook",
    "IPv4-mapped loopback": "https://[::ffff:127.0.0.1]/hook",
    "IPv4-mapped loopback, hex": "https://[::ffff:7f00:1]/hook",
    "IPv4-mapped metadata": "https://[::ffff:169.254.169.254]/latest/meta-data/",
    "IPv4-mapped private": "https://[::ffff:10.0.0.1]/hook",
    "NAT64 loopback": "https://[64:ff9b::7f00:1]/hook",
    "IPv4-compatible loopback": "https://[::127.0.0.1]/hook",
    "metadata (AWS, GCP, Azure)": "https://169.254.169.254/latest/meta-data/",
    "metadata (ECS)": "https://169.254.170.2/v2/credentials",
    "metadata (AWS IPv6)": "https://[fd00:ec2::254]/latest/meta-data/",
    "metadata (Alibaba, CGNAT)": "https://100.100.100.200/latest/meta-data/",
    "metadata by name": "https://metadata.google.internal/computeMetadata/v1/",
    "link-local IPv4": "https://169.254.1.1/hook",
    "link-local IPv6": "https://[fe80::1]/hook",
    "unique-local IPv6": "https://[fd12:3456::1]/hook",
    "private 10/8": "https://10.0.0.1/hook",
    "private 172.16/12": "https://172.16.0.1/hook",
    "private 192.168/16": "https://192.168.1.1/hook",
    "name to private": "https://intranet.test/hook",
    "name to loopback and public": "https://mixed.test/hook",
    "userinfo: public name before @": "https://public.test@127.0.0.1/hook",
    "userinfo: with password": "https://public.test:443@169.254.169.254/hook",
    "userinfo: user:pass on IPv6": "https://user:pass@[::1]/hook",
    "userinfo: encoded @": "https://public.test%40@10.0.0.1/hook",
    "plain http to a public name": "http://public.test/hook",
}

DNS_TABLE = {
    "public.test": [[PUBLIC]],
    "metadata.google.internal": [["169.254.169.254"]],
    "intranet.test": [["10.20.30.40"]],
    "mixed.test": [[PUBLIC, "127.0.0.1"]],
}


@pytest.fixture
def dns() -> Iterator[LoopbackDns]:
    table = {name: [list(a) for a in answers] for name, answers in DNS_TABLE.items()}
    table["rebind.test"] = [[PUBLIC], ["127.0.0.1"]]
    with LoopbackDns(table) as server:
        yield server


@pytest.fixture
async def guarded(
    make_settings: Any, aiohttp_client: Any, dns: LoopbackDns
) -> AsyncIterator[GatewayHarness]:
    """A gateway with nothing allow-listed, resolving names through the test's DNS."""
    settings = make_settings(webhooks={"allow_hosts": [], "throttle_s": 0})
    app = create_app(settings, run_loops=False)
    app[WEBHOOK_POLICY] = ssrf.WebhookTargetPolicy([], resolver=LoopbackResolver(dns.port))
    client: TestClient = await aiohttp_client(app)
    yield GatewayHarness(app=app, client=client)


async def _count_jobs(gateway: GatewayHarness) -> int:
    async with gateway.store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(jobs))).scalar())


async def test_internal_webhook_targets_are_refused_at_create(guarded: GatewayHarness) -> None:
    accepted = {}
    for name, url in REFUSED.items():
        response = await guarded.client.post(
            "/v1/predictions",
            json={"version": VERSION, "input": {"prompt": "x"}, "webhook": url},
            headers=guarded.headers,
        )
        problem = await response.json() if response.status == 422 else {}
        if (
            response.status != 422
            or response.content_type != "application/problem+json"
            or "webhook" not in problem.get("detail", "")
        ):
            accepted[name] = (url, response.status)
    assert accepted == {}
    assert await _count_jobs(guarded) == 0


async def test_a_public_name_passes_the_check(guarded: GatewayHarness, dns: LoopbackDns) -> None:
    prediction = await guarded.create(
        {"version": VERSION, "input": {"prompt": "x"}, "webhook": "https://public.test/hook"}
    )
    assert prediction["status"] == "starting"
    assert "public.test" in dns.queries  # asked the test's server, not the machine's


async def test_a_name_that_rebinds_to_loopback_between_check_and_connect_is_refused(
    guarded: GatewayHarness, dns: LoopbackDns
) -> None:
    async with Receiver() as loopback:  # 127.0.0.1, where the rebinding points
        url = f"https://rebind.test:{loopback.port}/hook"
        job_id = await start_job(guarded, url, ["completed"])
        await observe(guarded, job_id, JobState.COMPLETED, output="x")
        await guarded.settle()
        assert loopback.received == []
    assert dns.queries.count("rebind.test") >= 2  # checked at create, again at connect
    (row,) = await outbox_rows(guarded.store.engine, job_id)
    assert (row.status, row.attempts) == ("dead", 1)
    assert "refused by the SSRF guard" in row.last_error and "127.0.0.1" in row.last_error
