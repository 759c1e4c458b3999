"""fal webhook signatures (adapters/fal_webhook.py) against the published test vectors.

``tests/data/fal_webhook_signature_vectors.json`` holds one signed delivery (a test key,
not fal's) and the verdict for each variation of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters import fal_webhook
from contracts.errors import WebhookVerificationError
from tests.support.upstreams.fal import jwk

VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "fal_webhook_signature_vectors.json").read_text()
)
SENT_AT = int(VECTORS["headers"]["x-fal-webhook-timestamp"])


def case(name: str) -> tuple[dict[str, str], bytes, dict[str, Any], float]:
    """Headers, body, JWKS and clock of one named variation."""
    headers = dict(VECTORS["headers"])
    body = VECTORS["body"].encode()
    jwks = VECTORS["jwks"]
    now = float(SENT_AT)
    if name == "reserialised_body":
        body = json.dumps(json.loads(body), indent=1).encode()
    elif name == "stale_timestamp":
        now = SENT_AT + 301.0
    elif name == "future_timestamp_within_leeway":
        now = SENT_AT - 299.0
    elif name == "wrong_user_id":
        headers["x-fal-webhook-user-id"] = "user-2"
    elif name == "rotated_keyset_second_key_valid":
        other = jwk(Ed25519PrivateKey.generate())
        jwks = {"keys": [other, *jwks["keys"]]}
    return headers, body, jwks, now


def verdict(name: str) -> str:
    headers, body, jwks, now = case(name)
    try:
        fal_webhook.verify(headers, body, fal_webhook.load_keys(jwks), now)
    except WebhookVerificationError as exc:
        return exc.detail.removeprefix("fal webhook has a ").replace(" ", "-")
    return "ok"


@pytest.mark.parametrize("name", sorted(VECTORS["results"]))
def test_vectors(name: str):
    assert verdict(name) == VECTORS["results"][name]


async def test_cache_fetches_once_and_again_after_a_rotation():
    headers, body, _, now = case("valid")
    published = [{"keys": [jwk(Ed25519PrivateKey.generate())]}, VECTORS["jwks"]]
    calls = []

    async def fetch() -> Any:
        calls.append(1)
        return published[min(len(calls) - 1, 1)]

    cache = fal_webhook.JwksCache(fetch, clock=lambda: now, min_refresh_s=0.0)
    await cache.verify(headers, body)  # old key set first: refetched, then verified
    await cache.verify(headers, body)
    assert len(calls) == 2


async def test_cache_refuses_without_refetching_inside_the_refresh_interval():
    headers, body, _, now = case("wrong_user_id")
    calls = []

    async def fetch() -> Any:
        calls.append(1)
        return VECTORS["jwks"]

    cache = fal_webhook.JwksCache(fetch, clock=lambda: now)
    with pytest.raises(WebhookVerificationError, match="bad signature"):
        await cache.verify(headers, body)
    assert len(calls) == 1


@pytest.mark.parametrize("missing", fal_webhook.HEADERS)
def test_a_missing_header_is_refused(missing: str):
    headers, body, jwks, now = case("valid")
    del headers[missing]
    with pytest.raises(WebhookVerificationError):
        fal_webhook.verify(headers, body, fal_webhook.load_keys(jwks), now)
