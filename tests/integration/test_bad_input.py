"""Bad input gets a clear 4xx problem+json and changes nothing, on every backend.

Every test here sends one kind of bad request, checks the answer is an RFC 9457
problem document (``application/problem+json``, a useful ``detail``, ``status`` equal
to the HTTP status, never a traceback; docs/replicate-api.md §5.1), then runs every
background loop (``settle``) and checks that no job, provider event or outbound message
appeared and that nothing was submitted to the provider.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from aiohttp import ClientResponse

from contracts.job import Job, JobState
from gateway.store.schema import jobs, outbox, provider_events
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

UNROUTED_VERSION = "f" * 64
UNKNOWN_ID = "a" * 26
GOOD = {"version": VERSION, "input": {"prompt": "hi"}}


# --- helpers ------------------------------------------------------------------------------


async def problem(response: ClientResponse, status: int, *, mentions: str = "") -> dict[str, Any]:
    """Assert ``response`` is a problem+json with ``status``; return the document."""
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == "application/problem+json", response.content_type
    assert "Traceback" not in text and 'File "' not in text
    body = json.loads(text)
    assert body["status"] == status
    assert body["title"] and isinstance(body["title"], str)
    assert body["detail"] and isinstance(body["detail"], str)
    assert mentions.lower() in body["detail"].lower(), body["detail"]
    return body


@dataclass(frozen=True)
class Footprint:
    """Everything a request could have left behind."""

    jobs: int
    events: int
    messages: int
    submitted: int
    listed: int


async def footprint(gateway: GatewayHarness) -> Footprint:
    """Run every loop until quiet, then count rows, submits and listed predictions."""
    await gateway.settle()
    counts = []
    async with gateway.store.engine.connect() as conn:
        for table in (jobs, provider_events, outbox):
            query = sa.select(sa.func.count()).select_from(table)
            counts.append((await conn.execute(query)).scalar_one())
    listed = await gateway.client.get("/v1/predictions", headers=gateway.headers)
    assert listed.status == 200
    return Footprint(*counts, len(gateway.fake.submitted), len((await listed.json())["results"]))


async def post_raw(
    gateway: GatewayHarness, path: str, data: bytes, **headers: str
) -> ClientResponse:
    return await gateway.client.post(
        path,
        data=data,
        headers={**gateway.headers, "Content-Type": "application/json", **headers},
    )


async def rejected_create(
    gateway: GatewayHarness,
    body: Any,
    status: int,
    *,
    path: str = "/v1/predictions",
    mentions: str = "",
    **headers: str,
) -> dict[str, Any]:
    """POST ``body`` (JSON, or raw bytes), expect ``status``, and prove nothing changed."""
    before = await footprint(gateway)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    found = await problem(await post_raw(gateway, path, data, **headers), status, mentions=mentions)
    assert await footprint(gateway) == before
    assert gateway.fake.submitted == []
    return found


async def submitted_job(gateway: GatewayHarness) -> Job:
    """A job accepted by the fake provider (state ``queued``)."""
    created = await gateway.create(GOOD)
    await gateway.settle()
    job = await gateway.store.get(created["id"])
    assert job.state is JobState.QUEUED
    return job


# --- malformed bodies ---------------------------------------------------------------------


async def test_malformed_json_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, b'{"version": "acme/echo", "input": {', 422, mentions="JSON")


async def test_a_json_array_body_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, [GOOD], 422, mentions="object")


async def test_an_empty_create_body_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, b"", 422, mentions="object")


async def test_nan_in_the_body_is_422_not_silently_stored(gateway: GatewayHarness):
    body = b'{"version": "acme/echo", "input": {"x": NaN}}'
    await rejected_create(gateway, body, 422, mentions="NaN")


async def test_absurdly_nested_json_is_422_not_500(gateway: GatewayHarness):
    deep = b"[" * 20_000 + b"]" * 20_000
    body = b'{"version": "acme/echo", "input": {"x": ' + deep + b"}}"
    await rejected_create(gateway, body, 422, mentions="nested")


async def test_input_as_a_string_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, {"version": VERSION, "input": "hi"}, 422, mentions="input")


async def test_version_as_a_number_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, {"version": 5, "input": {}}, 422, mentions="version")


async def test_an_unknown_webhook_event_is_422(gateway: GatewayHarness):
    body = {**GOOD, "webhook_events_filter": ["completed", "exploded"]}
    await rejected_create(gateway, body, 422, mentions="exploded")


async def test_an_unknown_top_level_field_is_422(gateway: GatewayHarness):
    # The request schema sets additionalProperties: false (§2.1).
    await rejected_create(gateway, {**GOOD, "temperature": 1}, 422, mentions="temperature")


async def test_missing_input_is_422(gateway: GatewayHarness):
    await rejected_create(gateway, {"version": VERSION}, 422, mentions="input")


async def test_missing_input_on_the_models_route_is_422(gateway: GatewayHarness):
    await rejected_create(
        gateway, {}, 422, path="/v1/models/acme/plain/predictions", mentions="input"
    )


async def test_version_on_the_models_route_is_422(gateway: GatewayHarness):
    # POST /v1/models/{o}/{n}/predictions takes no version (§2.2).
    await rejected_create(
        gateway, GOOD, 422, path="/v1/models/acme/plain/predictions", mentions="version"
    )


async def test_an_oversized_body_is_413(make_gateway):
    gateway = await make_gateway(gateway={"max_body_bytes": 1024})
    body = {"version": VERSION, "input": {"prompt": "x" * 2048}}
    await rejected_create(gateway, body, 413, mentions="1024")


# --- unknown targets ----------------------------------------------------------------------


async def test_an_unrouted_version_id_is_404(gateway: GatewayHarness):
    await rejected_create(
        gateway, {"version": UNROUTED_VERSION, "input": {}}, 404, mentions=UNROUTED_VERSION
    )


async def test_an_unrouted_model_with_a_version_is_404(gateway: GatewayHarness):
    body = {"version": f"other/model:{VERSION}", "input": {}}
    await rejected_create(gateway, body, 404, mentions="other/model")


async def test_a_malformed_version_string_is_422(gateway: GatewayHarness):
    for version in ("not a version", "acme/echo:abc", "acme/echo:" + "F" * 64, "acme", "/x", ""):
        await rejected_create(gateway, {"version": version, "input": {}}, 422, mentions="version")


async def test_an_unrouted_model_is_404(gateway: GatewayHarness):
    await rejected_create(
        gateway, {"input": {}}, 404, path="/v1/models/o/n/predictions", mentions="o/n"
    )


async def test_an_unrouted_deployment_is_404(gateway: GatewayHarness):
    await rejected_create(
        gateway, {"input": {}}, 404, path="/v1/deployments/o/n/predictions", mentions="o/n"
    )


async def test_get_of_an_unknown_prediction_is_404(gateway: GatewayHarness):
    for prediction_id in (UNKNOWN_ID, "not-an-id", "A" * 26):
        response = await gateway.client.get(
            f"/v1/predictions/{prediction_id}", headers=gateway.headers
        )
        await problem(response, 404, mentions=prediction_id)


async def test_cancel_of_an_unknown_prediction_is_404_and_changes_nothing(
    gateway: GatewayHarness,
):
    before = await footprint(gateway)
    response = await gateway.client.post(
        f"/v1/predictions/{UNKNOWN_ID}/cancel", headers=gateway.headers
    )
    await problem(response, 404, mentions=UNKNOWN_ID)
    assert await footprint(gateway) == before
    assert gateway.fake.cancel_calls == []


# --- bad headers --------------------------------------------------------------------------


async def test_a_bad_cancel_after_is_422(gateway: GatewayHarness):
    for value in ("abc", "2s", "4", "", "1h-5m", "5 m", "nan", "inf", "-30"):
        headers = {"Cancel-After": value}
        await rejected_create(gateway, GOOD, 422, mentions="Cancel-After", **headers)


async def test_a_cancel_after_with_thousands_of_digits_is_422_not_500(gateway: GatewayHarness):
    # int() refuses more than 4300 digits; such a value is as infinite as "1e999".
    for value in ("9" * 4301 + "h", "9" * 4301 + "m", "9" * 400 + "h", "1" * 4301):
        await rejected_create(
            gateway, GOOD, 422, mentions="Cancel-After", **{"Cancel-After": value}
        )


async def test_an_overlong_idempotency_key_is_422(gateway: GatewayHarness):
    # 238 = the store's 255 characters less the token scope ("<16 hex>:").
    for key in ("k" * 239, "k" * 256):
        await rejected_create(
            gateway, GOOD, 422, mentions="238 characters", **{"Idempotency-Key": key}
        )


async def post_raw_header(gateway: GatewayHarness, name: bytes, value: bytes) -> dict[str, Any]:
    """POST a good create with one header sent as raw bytes (aiohttp's client would
    refuse or re-encode it); return the answer's status and body."""
    server = gateway.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    body = json.dumps(GOOD).encode()
    head = [
        b"POST /v1/predictions HTTP/1.1",
        b"Host: gateway.test",
        f"Authorization: Bearer {TOKEN}".encode(),
        b"Content-Type: application/json",
        f"Content-Length: {len(body)}".encode(),
        b"Connection: close",
        name + b": " + value,
    ]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"application/problem+json" in headers, headers
    return {"status": int(status_line.split()[1]), **json.loads(payload)}


async def test_an_idempotency_key_that_is_not_printable_ascii_is_422(gateway: GatewayHarness):
    before = await footprint(gateway)
    # (aiohttp itself answers 400 to NUL and DEL in a header)
    for raw in (b"k\xff", "\u00e9t\u00e9".encode(), b"a\tb"):
        found = await post_raw_header(gateway, b"Idempotency-Key", raw)
        assert found["status"] == 422, (raw, found)
        assert "printable ASCII" in found["detail"]
    assert await footprint(gateway) == before


# --- webhook targets refused by the SSRF guard --------------------------------------------


# The test config allow-lists 127.0.0.1 only. None of these URLs needs a DNS lookup to be
# refused, and none is ever contacted.
REFUSED_WEBHOOKS = (
    "http://127.0.0.2/x",  # loopback, and http to a host that is not allow-listed
    "http://localhost/x",  # a name is never vouched for by an allow-listed address
    "https://169.254.169.254/",  # cloud metadata (link-local)
    "https://[::1]/x",
    "https://127.1/x",  # legacy IPv4 form of 127.0.0.1
    "https://10.0.0.1/x",
    "https://user:pw@127.0.0.1/x",
)


async def test_a_webhook_refused_by_the_ssrf_guard_is_422(gateway: GatewayHarness):
    for url in REFUSED_WEBHOOKS:
        await rejected_create(gateway, {**GOOD, "webhook": url}, 422, mentions="webhook")


async def test_a_webhook_that_is_not_an_http_url_is_422(gateway: GatewayHarness):
    for url in ("ftp://127.0.0.1/x", "/relative", "not a url"):
        await rejected_create(gateway, {**GOOD, "webhook": url}, 422, mentions="webhook")


async def test_a_webhook_host_that_is_not_a_valid_name_is_422(gateway: GatewayHarness):
    # Refused while IDNA-encoding the name, before any DNS query.
    for url in ("https://a..b/", f"https://{'a' * 64}.example/"):
        await rejected_create(
            gateway, {**GOOD, "webhook": url}, 422, mentions="not a valid host name"
        )


async def test_a_webhook_with_control_characters_or_spaces_is_422(gateway: GatewayHarness):
    # PostgreSQL cannot store NUL in text; none of these is a URL anyone can deliver to.
    for url in (
        "https://hooks.example/\u0000",
        "https://hooks\u0000.example/",
        "https://hooks.example/a b",
        "https://hooks.example/\r\nX-Injected: 1",
        "https://hooks.example/\u0085",
        "https://hooks.example/x\t",
    ):
        for field in ("webhook", "webhook_completed"):
            await rejected_create(gateway, {**GOOD, field: url}, 422, mentions="control")


# --- authentication -----------------------------------------------------------------------


BAD_AUTHORIZATIONS = (
    None,
    "",
    "Bearer",
    "Bearer ",
    "Bearer wrong",
    f"Bearer {TOKEN}x",
    f"Basic {TOKEN}",
    TOKEN,  # no scheme
)


async def test_a_missing_or_invalid_token_is_401(gateway: GatewayHarness):
    before = await footprint(gateway)
    for authorization in BAD_AUTHORIZATIONS:
        headers = {} if authorization is None else {"Authorization": authorization}
        for method, path in (("POST", "/v1/predictions"), ("GET", f"/v1/predictions/{UNKNOWN_ID}")):
            response = await gateway.client.request(method, path, json=GOOD, headers=headers)
            await problem(response, 401, mentions="token")
    assert await footprint(gateway) == before


async def test_bearer_and_legacy_token_schemes_are_both_accepted(gateway: GatewayHarness):
    for scheme in ("Bearer", "Token", "bearer", "token"):
        response = await gateway.client.post(
            "/v1/predictions", json=GOOD, headers={"Authorization": f"{scheme} {TOKEN}"}
        )
        assert response.status == 201, await response.text()
    assert (await footprint(gateway)).jobs == 4


# --- forged, replayed and garbled provider webhooks ---------------------------------------


async def test_a_provider_webhook_with_the_wrong_token_is_401(gateway: GatewayHarness):
    job = await submitted_job(gateway)
    before = await footprint(gateway)
    body = gateway.fake.webhook_body(job.id, JobState.COMPLETED, output="forged")
    url = f"/provider-webhooks/fake/{job.id}/not-the-token"
    response = await gateway.client.post(url, data=body, headers=gateway.fake.sign(body))
    await problem(response, 401)
    assert await footprint(gateway) == before
    assert await gateway.store.get(job.id) == job


async def test_a_provider_webhook_with_a_bad_signature_is_401(gateway: GatewayHarness):
    job = await submitted_job(gateway)
    before = await footprint(gateway)
    _, token = await gateway.store.callback_token(job.id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(job.id, JobState.COMPLETED, output="forged")
    for headers in ({}, {"x-fake-signature": "0" * 64}, gateway.fake.sign(body + b" ")):
        response = await gateway.client.post(
            f"/provider-webhooks/fake/{job.id}/{token}", data=body, headers=headers
        )
        await problem(response, 401, mentions="signature" if headers else "unsigned")
    assert await footprint(gateway) == before
    assert await gateway.store.get(job.id) == job


async def test_a_provider_webhook_for_an_unknown_job_is_401(gateway: GatewayHarness):
    job = await submitted_job(gateway)
    before = await footprint(gateway)
    _, token = await gateway.store.callback_token(job.id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(UNKNOWN_ID, JobState.COMPLETED, output="forged")
    response = await gateway.client.post(
        f"/provider-webhooks/fake/{UNKNOWN_ID}/{token}", data=body, headers=gateway.fake.sign(body)
    )
    await problem(response, 401)
    assert await footprint(gateway) == before
    assert await gateway.store.get(job.id) == job


async def test_a_provider_webhook_naming_the_wrong_provider_is_401(gateway: GatewayHarness):
    job = await submitted_job(gateway)
    before = await footprint(gateway)
    _, token = await gateway.store.callback_token(job.id)  # type: ignore[misc]
    body = gateway.fake.webhook_body(job.id, JobState.COMPLETED, output="forged")
    response = await gateway.client.post(
        f"/provider-webhooks/cog/{job.id}/{token}", data=body, headers=gateway.fake.sign(body)
    )
    await problem(response, 401)
    assert await footprint(gateway) == before
    assert await gateway.store.get(job.id) == job


async def test_a_replayed_terminal_webhook_changes_nothing(gateway: GatewayHarness):
    job = await submitted_job(gateway)
    assert await gateway.deliver(job.id, JobState.COMPLETED, output="first") == 200
    done = await gateway.wait_for(job.id, "succeeded")
    before = await footprint(gateway)
    assert await gateway.deliver(job.id, JobState.COMPLETED, output="first") == 200
    after = await footprint(gateway)
    assert after == before  # the duplicate body was not even stored again
    assert await gateway.get(job.id) == done


async def test_a_late_non_terminal_webhook_after_the_terminal_one_changes_nothing(
    gateway: GatewayHarness,
):
    job = await submitted_job(gateway)
    assert await gateway.deliver(job.id, JobState.COMPLETED, output="first") == 200
    done = await gateway.wait_for(job.id, "succeeded")
    stored = await gateway.store.get(job.id)
    assert await gateway.deliver(job.id, JobState.RUNNING, logs="late\n") == 200
    assert await gateway.deliver(job.id, JobState.FAILED, error="late") == 200
    await gateway.settle()
    assert await gateway.get(job.id) == done
    assert await gateway.store.get(job.id) == stored


async def test_a_signed_but_unparseable_provider_webhook_leaves_the_job_unchanged(
    gateway: GatewayHarness,
):
    job = await submitted_job(gateway)
    _, token = await gateway.store.callback_token(job.id)  # type: ignore[misc]
    for body in (b"not json", b"[]", b'{"status": "exploded"}', b'{"id": "x"}', b"", b"\xff"):
        response = await gateway.client.post(
            f"/provider-webhooks/fake/{job.id}/{token}", data=body, headers=gateway.fake.sign(body)
        )
        text = await response.text()
        assert response.status in {200, 400, 401, 422}, text  # acknowledged or refused
        assert "Traceback" not in text
        await gateway.settle()  # the event processor must survive it
        assert await gateway.store.get(job.id) == job
    # ... and still apply the next good event.
    assert await gateway.deliver(job.id, JobState.COMPLETED, output="ok") == 200
    assert (await gateway.wait_for(job.id, "succeeded"))["output"] == "ok"


# --- HTTP-level errors --------------------------------------------------------------------


async def test_a_wrong_method_is_405_problem_with_allow(gateway: GatewayHarness):
    for method, path in (("PUT", "/v1/predictions"), ("DELETE", f"/v1/predictions/{UNKNOWN_ID}")):
        response = await gateway.client.request(method, path, headers=gateway.headers)
        await problem(response, 405, mentions=method)
        assert "GET" in response.headers.get("Allow", ""), dict(response.headers)
    assert await footprint(gateway) == Footprint(0, 0, 0, 0, 0)


async def test_a_path_that_does_not_exist_is_404_problem(gateway: GatewayHarness):
    for path in ("/v1/nope", "/v2/predictions", "/v1/predictions/x/y/z"):
        await problem(await gateway.client.get(path, headers=gateway.headers), 404)
        await problem(await gateway.client.post(path, json=GOOD, headers=gateway.headers), 404)
    assert await footprint(gateway) == Footprint(0, 0, 0, 0, 0)


async def test_a_v1_v1_path_says_the_python_client_adds_v1_itself(gateway: GatewayHarness):
    """A Python client given base_url=".../v1" asks for /v1/v1/...: every call was a bare
    "could not be found" (README "Using it")."""
    response = await gateway.client.post("/v1/v1/predictions", json=GOOD, headers=gateway.headers)
    found = await problem(response, 404, mentions="without /v1")
    assert "adds /v1 to its base_url itself" in found["detail"]
    assert await footprint(gateway) == Footprint(0, 0, 0, 0, 0)


BAD_LIST_QUERIES = (
    "cursor=%25%25%25",
    "cursor=bmV4dHwyMDI0LTAxLTAxVDAwOjAwOjAwfGFiYw",  # "next|<naive time>|abc"
    "cursor=cHJldnwwMDAxLTAxLTAxVDAwOjAwOjAwKzA1OjAwfGFiYw",  # "prev|<year 0 in UTC>|abc"
    "created_after=garbage",
    "created_after=2024-01-01T00:00:00",  # no time zone
    "created_after=0001-01-01T00:00:00%2B01:00",  # before year 1 in UTC
    "created_before=9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
)


async def test_a_bad_list_query_is_422(gateway: GatewayHarness):
    for query in BAD_LIST_QUERIES:
        response = await gateway.client.get(f"/v1/predictions?{query}", headers=gateway.headers)
        await problem(response, 422)
