"""The last boundary defects (issue 20): capabilities compared as bytes, request bodies
read against a deadline, and a 413 that points to the Files API (docs/security.md,
docs/limits.md).

Every test here failed on the code before the fix: ``hmac.compare_digest`` raised
``TypeError`` on a non-ASCII ``str`` (a 500 without any token), a body announced larger
than it was sent held the connection with no answer, and the 413 named no setting.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.gateway import TOKEN, VERSION, GatewayHarness

# Query values the fuzz suites now send as well: UTF-8 letters, an emoji, a byte that is
# no UTF-8, a surrogate's UTF-8 encoding and a NUL.
NON_ASCII = ("%C3%A9", "%F0%9F%98%80", "%FF", "%ED%A0%80", "%00", "caf%C3%A9" * 8)


async def _created(gateway: GatewayHarness) -> dict[str, Any]:
    return await gateway.create(
        {"version": VERSION, "input": {"prompt": "x"}}, Prefer="respond-async"
    )


@pytest.mark.parametrize("value", NON_ASCII)
async def test_a_non_ascii_stream_token_is_404(gateway: GatewayHarness, value: str):
    prediction = await _created(gateway)
    response = await gateway.client.get(f"/streams/{prediction['id']}?t={value}")
    assert response.status == 404, await response.text()
    assert response.content_type == "application/problem+json"


@pytest.mark.parametrize("value", NON_ASCII)
async def test_a_non_ascii_download_signature_is_404(gateway: GatewayHarness, value: str):
    response = await gateway.client.get(
        f"/file-downloads/f0000000000000000000000000?expiry=9999999999&signature={value}"
    )
    assert response.status == 404, await response.text()


@pytest.mark.parametrize("value", NON_ASCII)
async def test_a_non_ascii_provider_webhook_token_is_refused(
    gateway: GatewayHarness, value: str
):
    prediction = await _created(gateway)
    response = await gateway.client.post(
        f"/provider-webhooks/fake/{prediction['id']}/{value}", data=b"{}"
    )
    assert response.status in {401, 404}, await response.text()


@given(st.text(), st.text() | st.binary())
def test_same_secret_answers_for_any_input(presented: str, expected: str | bytes):
    from contracts.auth import same_secret

    assert same_secret(presented, expected) == (
        presented.encode("utf-8", "surrogatepass")
        == (expected if isinstance(expected, bytes) else expected.encode("utf-8",
                                                                        "surrogatepass"))
    )
    assert same_secret(presented, presented)


# --- request bodies -----------------------------------------------------------------------


def _head(announced: int) -> bytes:
    head = [
        b"POST /v1/predictions HTTP/1.1",
        b"Host: gateway.test",
        f"Authorization: Bearer {TOKEN}".encode(),
        b"Content-Type: application/json",
        f"Content-Length: {announced}".encode(),
    ]
    return b"\r\n".join(head) + b"\r\n\r\n"


async def _raw_create(
    gateway: GatewayHarness, announced: int, sent: bytes
) -> tuple[int, dict[str, Any], bytes]:
    """POST a create announcing ``announced`` bytes, send ``sent`` and wait; return the
    status, the problem document and the headers (lower case), once the server closed."""
    server = gateway.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(_head(announced) + sent)
    await writer.drain()
    try:
        # The connection must end: read() returns at EOF, i.e. when the server closes.
        answer = await asyncio.wait_for(reader.read(), timeout=10.0)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload), headers.lower()


async def test_a_body_that_stops_arriving_is_408_and_the_connection_closes(
    make_gateway: Any,
):
    gateway = await make_gateway(gateway={"body_read_timeout_s": 0.3})
    status, problem, headers = await _raw_create(gateway, 5_000_000, b'{"version": "' + b"a" * 66)
    assert status == 408, problem
    assert "body_read_timeout_s" in problem["detail"]
    assert b"connection: close" in headers


async def test_a_create_announcing_more_than_max_body_bytes_is_413_at_once(
    gateway: GatewayHarness,
):
    sent = b'{"version": "x"' + b" " * 65
    status, problem, headers = await _raw_create(gateway, 30 * 2**20, sent)
    assert status == 413, problem
    assert "max_body_bytes" in problem["detail"]
    assert "POST /v1/files" in problem["detail"]
    assert b"connection: close" in headers


async def test_a_truncated_body_then_silence_is_408_and_the_connection_closes(
    make_gateway: Any,
):
    gateway = await make_gateway(gateway={"body_read_timeout_s": 0.3})
    status, problem, headers = await _raw_create(gateway, 1000, b'{"version": "' + b"a" * 66)
    assert status == 408, problem
    assert b"connection: close" in headers
    assert await _listed(gateway) == []


async def test_a_truncated_body_then_end_of_stream_closes_the_connection(
    gateway: GatewayHarness,
):
    """The client ends its side mid-body: aiohttp closes the connection at once (there is
    no one to read an answer from a half-closed socket it treats as gone); no hang and no
    prediction."""
    server = gateway.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(_head(1000) + b'{"version": "' + b"a" * 66)
    await writer.drain()
    writer.get_extra_info("socket").shutdown(socket.SHUT_WR)
    answer = await asyncio.wait_for(reader.read(), timeout=10.0)
    writer.close()
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert await _listed(gateway) == []


async def _listed(gateway: GatewayHarness) -> list[Any]:
    listed = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    results: list[Any] = (await listed.json())["results"]
    return results


async def test_a_413_read_from_the_body_names_the_setting_and_the_files_api(
    make_gateway: Any,
):
    gateway = await make_gateway(gateway={"max_body_bytes": 1024})
    body = json.dumps({"version": VERSION, "input": {"prompt": "x" * 4096}}).encode()

    async def chunks() -> Any:  # no Content-Length: the limit is found while reading
        yield body

    response = await gateway.client.post(
        "/v1/predictions", data=chunks(),
        headers={**gateway.headers, "Content-Type": "application/json"},
    )
    assert response.status == 413
    detail = (await response.json())["detail"]
    assert "max_body_bytes" in detail and "POST /v1/files" in detail
