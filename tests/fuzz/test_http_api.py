"""Fuzzing the whole HTTP API with Hypothesis: 5,000 generated requests, 0 answers of 5xx.

Bodies (random JSON, and valid create bodies with one field broken), headers
(``Authorization``, ``Prefer``, ``Cancel-After``, ``Idempotency-Key``, ``Content-Type``
and random ones), query strings of the list endpoint, capabilities and signatures in
query strings as any UTF-8 text or raw non-UTF-8 bytes, and any method on any route. For
every request: no 5xx; every refusal is a problem+json 4xx whose ``status`` is the HTTP
status; and a refused request changes no row of any table.

The gateway runs in-process on SQLite with its background loops stopped (so rows only
change through requests), served on a loop of its own in a thread; Hypothesis drives it
from synchronous tests (tests/support/fuzzing.py). schemathesis, driven by the gateway's
own ``/openapi.json``, fuzzes every operation in tests/fuzz/test_schemathesis.py; the
strategies here reach what that document does not describe (odd headers, query strings,
truncated bodies, unknown routes and methods; docs/reliability.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from tests.support.fuzzing import AUTH, FUZZ, Live
from tests.support.gateway import TOKEN, VERSION

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    made = Live(tmp_path_factory.mktemp("fuzz"))
    status, _, body = made.call("POST", "/v1/predictions", headers={**AUTH, "Prefer": "wait=0"},
                                json={"version": VERSION, "input": {"prompt": "p"}})
    assert status == 201, body
    made.prediction_id = json.loads(body)["id"]
    made.snapshot = made.rows()
    yield made
    total = made.requests
    made.close()
    print(f"fuzz: {total} requests, by status: {dict(sorted(made.statuses.items()))}")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=12,
)
ODD = st.sampled_from([
    None, True, 0, -1, 10**30, 1e308, "", " ", "\x00", "a" * 3000, "../../etc", "💥",
    [], {}, [None], {"": None}, "http://127.0.0.1/x", "data:,x",
]) | JSON
FIELDS = ["version", "input", "webhook", "webhook_events_filter", "webhook_completed", "stream",
          "model", "deployment", "extra"]


@st.composite
def create_bodies(draw: st.DrawFn) -> Any:
    """Mostly a valid create body with one or two fields broken; sometimes any JSON."""
    if draw(st.integers(0, 4)) == 0:
        return draw(JSON)
    body: dict[str, Any] = {"version": VERSION, "input": {"prompt": draw(st.text(max_size=20))}}
    for _ in range(draw(st.integers(1, 2))):
        body[draw(st.sampled_from(FIELDS))] = draw(ODD)
    return body


@settings(FUZZ, max_examples=2000)
@given(body=create_bodies(), route=st.sampled_from([
    "/v1/predictions", "/v1/models/acme/echo/predictions", "/v1/models/acme/plain/predictions",
    "/v1/deployments/acme/echo/predictions",
]), raw=st.booleans())
def test_create_bodies(live: Live, body: Any, route: str, raw: bool) -> None:
    if raw:  # the same value, as bytes that may not even be JSON
        data = json.dumps(body).encode()[: max(1, len(json.dumps(body)) - 1)]
        live.check("POST", route, data=data, headers={**AUTH, "Content-Type": "application/json"})
    else:
        live.check("POST", route, json=body, headers=AUTH)


HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60
) | st.sampled_from(["", "wait", "wait=0", "wait=61", "wait=-1", "respond-async", "5s", "0",
                     "1h30m", "1e309", "nan", "Bearer", "Bearer ", "Token r8_x", "\t"])


@settings(FUZZ, max_examples=1200)
@given(
    name=st.sampled_from(["Authorization", "Prefer", "Cancel-After", "Idempotency-Key",
                          "Content-Type", "X-Anything", "Accept", "Content-Encoding"]),
    value=HEADER_TEXT, method=st.sampled_from(["GET", "POST"]),
)
def test_headers(live: Live, name: str, value: str, method: str) -> None:
    headers = {**AUTH, name: value}
    if method == "GET":
        live.check("GET", "/v1/predictions", headers=headers)
        return
    body = {"version": VERSION, "input": {"prompt": "h"}}
    live.check("POST", "/v1/predictions", json=body, headers=headers)


# Any text, sent as UTF-8 (%C3%A9 for an e-acute), and raw percent-encoded bytes that are
# not UTF-8 at all: hmac.compare_digest on a non-ASCII str was a 500 (issue 20).
UNICODE_TEXT = st.text(max_size=40)


def quote_utf8(text: str) -> str:
    """``text`` percent-encoded as UTF-8 (lone surrogates too), nothing left unquoted."""
    return quote(text, safe="", errors="surrogatepass")


RAW_BYTES = st.binary(min_size=1, max_size=12).map(lambda b: "".join(f"%{c:02X}" for c in b))
QUERY_VALUE = HEADER_TEXT | UNICODE_TEXT | st.sampled_from([
    "2026-01-01T00:00:00Z", "2026-13-01", "9999-12-31T23:59:59+14:00", "-1", "abc==", "%00",
    "\u00e9", "caf\u00e9", "\U0001f600", "\udcff",
])


@settings(FUZZ, max_examples=900)
@given(params=st.dictionaries(
    st.sampled_from(["cursor", "created_after", "created_before", "page", "limit", "x"]),
    QUERY_VALUE, max_size=3,
))
def test_query_strings(live: Live, params: dict[str, str]) -> None:
    live.check("GET", "/v1/predictions", params=params, headers=AUTH)


CAPABILITY_PATHS = st.sampled_from([
    "/streams/{}?t={}", "/file-downloads/{}?expiry=9999999999&signature={}",
    "/file-downloads/{}?expiry={}&signature=00", "/v1/predictions?cursor={}{}",
    "/v1/files/{}?x={}", "/v1/predictions/{}?t={}",
])


@settings(FUZZ, max_examples=600)
@given(template=CAPABILITY_PATHS, value=RAW_BYTES | UNICODE_TEXT.map(quote_utf8),
       real=st.booleans())
def test_non_ascii_query_values(live: Live, template: str, value: str, real: bool) -> None:
    """Capabilities and signatures in query strings, as raw (already encoded) bytes."""
    ident = live.prediction_id if real else "f0000000000000000000000000"
    path = template.format(value, "") if "cursor" in template else template.format(ident, value)
    live.check("GET", URL(path, encoded=True), headers=AUTH)


SEGMENT = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126,
                                         exclude_characters="/?#%"), min_size=1, max_size=30)
PATHS = st.sampled_from([
    "/v1/predictions/{}", "/v1/predictions/{}/cancel", "/v1/models/{}/{}",
    "/v1/models/{}/{}/versions", "/v1/models/{}/{}/versions/{}", "/v1/deployments/{}/{}",
    "/v1/account", "/v1/webhooks/default/secret", "/v1/files", "/v1/{}",
    "/provider-webhooks/fake/{}/{}", "/provider-webhooks/{}/{}/{}", "/assets/{}/{}/{}",
    "/admin/webhooks/dead", "/admin/webhooks/dead/{}", "/admin/webhooks/dead/{}/replay",
    "/health", "/ready", "/{}",
    "/v1/files/{}", "/v1/files/{}/download", "/streams/{}", "/file-downloads/{}",
    "/openapi.json",
])


@settings(FUZZ, max_examples=900)
@given(template=PATHS, segments=st.lists(SEGMENT, min_size=3, max_size=3),
       method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), body=JSON,
       token=st.sampled_from([TOKEN, "", "wrong"]))
def test_any_route_and_method(
    live: Live, template: str, segments: list[str], method: str, body: Any, token: str
) -> None:
    path = template.format(*segments[: template.count("{}")])
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    live.check(method, path, json=body, headers=headers)


@pytest.fixture(autouse=True)
def _count(request: pytest.FixtureRequest, live: Live) -> None:
    live.tests.add(request.node.name)


def test_at_least_5000_requests_were_made(live: Live) -> None:
    if len(live.tests) < 5:
        pytest.skip("only part of the module ran")
    assert live.requests >= 5000
