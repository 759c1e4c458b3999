"""Webhook bodies byte-identical to JS (gateway.wire.compact_json), and signatures every
client accepts (gateway.webhooks.signing)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import standardwebhooks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replicate.webhook import InvalidSignatureError, Webhooks, WebhookSigningSecret

from contracts import errors
from gateway import wire
from gateway.webhooks import signing

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node (Node.js) is not on PATH")

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


# --- strategies --------------------------------------------------------------------------

_any_char = st.characters(exclude_categories=())  # surrogates included
_tricky_text = st.sampled_from(
    ["", "\u2028", "\u2029", "\x00", "\x1f", "\x7f", "\ud800", "\udfff", "\ud83d\ude00",
     "\ud83d", "é", "日本語", "😀", "/", "\\", '"', "\b\f\n\r\t", "</script>"]
)  # fmt: skip
_text = st.text(_any_char, max_size=12) | _tricky_text
_keys = (
    _text
    | st.integers(0, 2**32 + 5).map(str)
    | st.sampled_from(["0", "00", "01", "-1", "1.5", "4294967294", "4294967295", "__proto__"])
)
_ints = st.integers(-(2**1023), 2**1023) | st.sampled_from(
    [2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**60, 10**21, 10**21 + 1, 2**64 - 1]
)
_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [
        1.0,
        -0.0,
        0.1,
        1e-7,
        1e-6,
        1.5e-7,
        1e20,
        1e21,
        123e-20,
        5e-324,
        2.0**53,
        1.7976931348623157e308,
    ]
)
_scalars = st.none() | st.booleans() | _ints | _floats | _text
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=25,
)


# --- a long-lived Node process: JSON.stringify(JSON.parse(line)) ------------------------

_NODE_ROUNDTRIP = r"""
const readline = require("node:readline");
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  const text = Buffer.from(line, "base64").toString("utf8");
  let out;
  try { out = "=" + JSON.stringify(JSON.parse(text)); } catch (err) { out = "!" + err; }
  process.stdout.write(Buffer.from(out, "utf8").toString("base64") + "\n");
});
"""


class NodeJson:
    """One Node process answering base64 lines, so the body never meets a line break."""

    def __init__(self, node: str) -> None:
        self._proc = subprocess.Popen(
            [node, "-e", _NODE_ROUNDTRIP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def restringify(self, body: bytes) -> bytes:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(base64.b64encode(body) + b"\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("node exited early")
        out = base64.b64decode(line)
        if not out.startswith(b"="):
            raise AssertionError(f"JSON.parse refused our body: {out[1:]!r} for {body!r}")
        return out[1:]

    def close(self) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=10)
        self._proc.stdout.close()
        if self._proc.stderr is not None:
            self._proc.stderr.close()


@pytest.fixture(scope="module")
def node_json() -> Iterator[NodeJson]:
    if NODE is None:
        pytest.skip("node (Node.js) is not on PATH")
    runner = NodeJson(NODE)
    yield runner
    runner.close()


# --- secrets -----------------------------------------------------------------------------


def test_generate_secret_suits_both_clients() -> None:
    secrets = {signing.generate_secret() for _ in range(200)}
    assert len(secrets) == 200
    for secret in secrets:
        prefix, encoded = secret.split("_")  # the Python client wants exactly 2 parts
        assert prefix == "whsec"
        assert len(base64.b64decode(encoded, validate=True)) == 32
        assert len(secret) == 50


# --- compact_json: fixed cases -----------------------------------------------------------

EDGE_CASES: list[tuple[object, bytes]] = [
    (1.0, b"1"),
    (-0.0, b"0"),
    (0.1, b"0.1"),
    (1e-7, b"1e-7"),
    (1e-6, b"0.000001"),
    (1.5e-7, b"1.5e-7"),
    (1e20, b"100000000000000000000"),
    (1e21, b"1e+21"),
    (123.456e30, b"1.23456e+32"),
    (5e-324, b"5e-324"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"),
    (2**53, b"9007199254740992"),
    (2**53 + 1, b"9007199254740992"),
    (2**60, b"1152921504606847000"),
    (-(10**22), b"-1e+22"),
    (True, b"true"),
    (None, b"null"),
    ("\x00\x1f\x7f", b'"\\u0000\\u001f\x7f"'),
    ("\b\f\n\r\t", b'"\\b\\f\\n\\r\\t"'),
    ('"\\/', b'"\\"\\\\/"'),
    ("\u2028\u2029", '"\u2028\u2029"'.encode()),
    ("\ud800x\udfff", b'"\\ud800x\\udfff"'),
    ("\ud83d\ude00", '"😀"'.encode()),
    ("café 日本", '"café 日本"'.encode()),
    ({"b": 1, "10": 2, "2": 3, "01": 4, "4294967295": 5, "4294967294": 6, "a": [1.0, {}]},
     b'{"2":3,"10":2,"4294967294":6,"b":1,"01":4,"4294967295":5,"a":[1,{}]}'),
    ((1, [2, (3,)]), b"[1,[2,[3]]]"),
    ({"😀": 1, "\ud83d\ude00": 2, "z": 3}, '{"😀":2,"z":3}'.encode()),  # one key to JS
]  # fmt: skip


@pytest.mark.parametrize(("value", "expected"), EDGE_CASES)
def test_compact_json_edge_cases(value: object, expected: bytes) -> None:
    assert wire.compact_json(value) == expected


@needs_node
def test_edge_cases_match_node(node_json: NodeJson) -> None:
    for _, expected in EDGE_CASES:
        assert node_json.restringify(expected) == expected


@needs_node
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values)
def test_compact_json_is_what_js_restringify_produces(node_json: NodeJson, value: object) -> None:
    body = wire.compact_json(value)
    assert node_json.restringify(body) == body


@given(value=json_values)
def test_compact_json_is_valid_compact_utf8_json(value: object) -> None:
    body = wire.compact_json(value)
    text = body.decode("utf-8")  # never a raw surrogate
    parsed = json.loads(text)
    assert wire.compact_json(parsed) == body  # a fixed point


_plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=15,
)


def _as_doubles(value: object) -> object:
    """What a value means to JS: every number a double (``1.0`` is written ``1``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | list | dict):
        return value
    if isinstance(value, list):
        return [_as_doubles(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_doubles(item) for key, item in value.items()}
    return float(value)


@given(value=_plain_values)
def test_compact_json_round_trips_through_python(value: object) -> None:
    parsed = json.loads(wire.compact_json(value), parse_int=float)
    assert parsed == _as_doubles(value)


# The fast path (orjson, gateway/wire.py) must write what the exact encoder
# writes, byte for byte: the webhook signature covers these bytes. Values that mostly take
# it (no surrogate, integers near 2**53, floats JS prints otherwise, array-index keys).
_orjson_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=6) | st.sampled_from(
    ["0", "00", "01", "7", "4294967294", "4294967295", "-1", "1.0", "\u0661", "\u00b2"]
)
_orjson_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [-0.0, 1.0, 1e16, 1e21, 1e-7, 1e-6, 5e-324, 2.0**53, 2.0**53 + 2, 0.1 + 0.2, 1.5e300]
)
_orjson_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) - 2, 2**53 + 2)
    | _orjson_floats
    | st.text(st.characters(exclude_categories=("Cs",)))
    | _tricky_text,
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(_orjson_keys, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None)
@given(value=_orjson_values | json_values)
def test_the_fast_path_writes_the_exact_encoders_bytes(value: object) -> None:
    try:
        exact = "".join(wire._encode(value, set())).encode("utf-8")
    except (ValueError, TypeError) as exc:
        with pytest.raises(type(exc)):
            wire.compact_json(value)
        return
    assert wire.compact_json(value) == exact


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1, {"x": math.nan}], 2**1100])
def test_compact_json_refuses_what_json_cannot_carry(value: object) -> None:
    with pytest.raises(ValueError):
        wire.compact_json(value)


def test_compact_json_refuses_cycles_and_foreign_types() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="circular"):
        wire.compact_json(loop)
    with pytest.raises(TypeError):
        wire.compact_json({1: "a"})
    with pytest.raises(TypeError):
        wire.compact_json({"a": {1, 2}})
    shared = [1]
    assert wire.compact_json([shared, shared]) == b"[[1],[1]]"  # repeats are not cycles


@pytest.mark.parametrize("depth", [600, 5_000])
def test_compact_json_refuses_nesting_deeper_than_the_encoder_goes(depth: int) -> None:
    """A provider output nested deeper than the exact encoder can recurse is a
    ValueError (the store refuses it and the job fails), not a RecursionError."""
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    with pytest.raises(ValueError, match="nested"):
        wire.compact_json(value)


# --- Signer ----------------------------------------------------------------------------

BODY = wire.compact_json(
    {"id": "p1", "status": "succeeded", "output": ["é", 1.0, {"nested": {"x": 1e-7}}]}
)


def _replicate_accepts(headers: dict[str, str], body: bytes, secret: str) -> bool:
    try:
        Webhooks.validate(
            headers=headers,
            body=body.decode("utf-8"),
            secret=WebhookSigningSecret(key=secret),
            tolerance=300,
        )
    except InvalidSignatureError:
        return False
    return True


def _standard_accepts(headers: dict[str, str], body: bytes, secret: str) -> bool:
    try:
        standardwebhooks.Webhook(secret).verify(body, headers)
    except standardwebhooks.WebhookVerificationError:
        return False
    return True


def test_headers_verify_with_replicate_and_standardwebhooks() -> None:
    secret = signing.generate_secret()
    headers = signing.Signer(secret).headers("msg_1", int(time.time()), BODY, now=NOW)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-signature"].startswith("v1,")
    assert " " not in headers["webhook-signature"]
    assert _replicate_accepts(headers, BODY, secret)
    assert _standard_accepts(headers, BODY, secret)
    assert not _replicate_accepts(headers, BODY + b" ", secret)
    assert not _replicate_accepts(headers, BODY, signing.generate_secret())


def test_rotation_overlap_then_new_secret_only() -> None:
    old, new = signing.generate_secret(), signing.generate_secret()
    until = NOW + timedelta(hours=1)
    signer = signing.Signer(new, previous_secret=old, previous_valid_until=until)
    ts = int(time.time())

    during = signer.headers("msg_2", ts, BODY, now=until - timedelta(seconds=1))
    assert len(during["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert _replicate_accepts(during, BODY, secret)
        assert _standard_accepts(during, BODY, secret)

    after = signer.headers("msg_2", ts, BODY, now=until)
    assert len(after["webhook-signature"].split(" ")) == 1
    assert _replicate_accepts(after, BODY, new)
    assert _standard_accepts(after, BODY, new)
    assert not _replicate_accepts(after, BODY, old)
    assert not _standard_accepts(after, BODY, old)


@settings(max_examples=50)
@given(
    value=json_values,
    msg_id=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1),
    timestamp_s=st.integers(0, 2**33),
)
def test_any_delivery_verifies_with_replicate(value: object, msg_id: str, timestamp_s: int) -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    body = wire.compact_json(value)
    headers = signing.Signer(secret).headers(msg_id, timestamp_s, body, now=NOW)
    Webhooks.validate(
        headers=headers, body=body.decode("utf-8"), secret=WebhookSigningSecret(key=secret)
    )


def test_signature_matches_the_scheme_by_hand() -> None:
    key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(key).decode()
    body = '{"a":"é"}'.encode()
    signature = signing.Signer(secret).sign("msg_3", 1700000000, body, now=NOW)
    digest = hmac.new(key, b"msg_3.1700000000." + body, hashlib.sha256).digest()
    assert signature == "v1," + base64.b64encode(digest).decode()


@pytest.mark.parametrize(
    "secret",
    ["abc", "whsec_", "whsec_not base64!", "whsec_a_b", "whsec_" + "_" * 4, "sk_" + "A" * 44],
)
def test_bad_secrets_are_configuration_errors(secret: str) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        signing.Signer(secret)
    encoded = secret.partition("_")[2]
    if len(encoded) > 3:
        assert encoded not in caught.value.detail  # never echo a secret


def test_overlap_needs_an_aware_deadline() -> None:
    new, old = signing.generate_secret(), signing.generate_secret()
    with pytest.raises(errors.ConfigurationError):
        signing.Signer(new, previous_secret=old)
    with pytest.raises(errors.ConfigurationError):
        signing.Signer(new, previous_secret=old, previous_valid_until=datetime(2030, 1, 1))
    with pytest.raises(errors.ConfigurationError):
        signing.Signer(new, previous_valid_until=NOW)


def test_sign_refuses_bad_inputs() -> None:
    signer = signing.Signer(signing.generate_secret())
    with pytest.raises(ValueError, match="timezone"):
        signer.sign("m", 1, b"{}", now=datetime(2030, 1, 1))
    for bad in ("", "a b", "a\nb"):
        with pytest.raises(ValueError, match="webhook id"):
            signer.sign(bad, 1, b"{}", now=NOW)
    with pytest.raises(ValueError):
        signer.sign("m", 1, b"\xff", now=NOW)
    with pytest.raises(TypeError):
        signer.sign("m", 1.5, b"{}", now=NOW)  # type: ignore[arg-type]


def test_repr_hides_secrets() -> None:
    secret = signing.generate_secret()
    assert secret not in repr(signing.Signer(secret))
    assert secret[6:] not in repr(signing.Signer(secret))


# --- the JS client's validateWebhook, re-implemented from §6.5 -----------------------------

_JS_VALIDATE = r"""
const crypto = require("node:crypto");

// As replicate-javascript's validateWebhook behaves (spec §6.5): object bodies are
// re-serialised with JSON.stringify; the secret is split on "_" and the last part used;
// each space-separated entry's text after its first comma is compared with ===.
function validateWebhook({ id, timestamp, signature, body, secret }) {
  if (!id || !timestamp || !signature) throw new Error("Missing required webhook headers");
  const text = typeof body === "string" ? body : JSON.stringify(body);
  const key = Buffer.from(secret.split("_").pop(), "base64");
  const computed = crypto.createHmac("sha256", key)
    .update(`${id}.${timestamp}.${text}`).digest("base64");
  return signature.split(" ").some((entry) => {
    const comma = entry.indexOf(",");
    return comma >= 0 && entry.slice(comma + 1) === computed;
  });
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const results = JSON.parse(input).map((c) => validateWebhook({
    id: c.headers["webhook-id"],
    timestamp: c.headers["webhook-timestamp"],
    signature: c.headers["webhook-signature"],
    body: JSON.parse(c.body),  // the receiver already parsed the request body
    secret: c.secret,
  }));
  process.stdout.write(JSON.stringify(results));
});
"""


@needs_node
def test_js_validate_webhook_accepts_a_reserialised_body() -> None:
    assert NODE is not None
    prediction = {
        "id": "ufawqhfynnddngldkgtslldrkq",
        "status": "succeeded",
        "input": {"prompt": "café ☕ 日本語 😀 \u2028 \"quoted\"", "scale": 7.0, "steps": 50},
        "output": [{"10": "ten", "2": "two", "url": "https://x/y.png"}],
        "metrics": {"predict_time": 1.5e-7, "total_time": 12.0, "big": 1e21, "neg": -0.0},
        "logs": "line1\nline2\ttab\x01",
        "error": None,
    }  # fmt: skip
    body = wire.compact_json(prediction)
    old, new = signing.generate_secret(), signing.generate_secret()
    until = NOW + timedelta(minutes=10)
    signer = signing.Signer(new, previous_secret=old, previous_valid_until=until)
    during = signer.headers("msg_js", 1700000000, body, now=NOW)
    after = signer.headers("msg_js", 1700000000, body, now=until)
    python_default = json.dumps(prediction).encode()  # spaces, \u escapes: JS re-serialises
    cases = [
        {"headers": during, "body": body.decode(), "secret": new},
        {"headers": during, "body": body.decode(), "secret": old},
        {"headers": after, "body": body.decode(), "secret": new},
        {"headers": after, "body": body.decode(), "secret": old},
        {
            "headers": signer.headers("msg_js", 1700000000, python_default, now=until),
            "body": python_default.decode(),
            "secret": new,
        },
    ]
    done = subprocess.run(
        [NODE, "-e", _JS_VALIDATE],
        input=json.dumps(cases).encode(),
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [True, True, True, False, False]
