"""Output files are copied into owned storage before a prediction is reported succeeded
(docs/architecture.md, invariant 4): checked, hashed, and served from the gateway's own URLs."""

from __future__ import annotations

import base64
import hashlib

import sqlalchemy as sa

from contracts.job import JobState
from gateway.store.schema import assets
from tests.support.gateway import VERSION, GatewayHarness


def data_uri(content_type: str, data: bytes) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


async def finish_with(gateway: GatewayHarness, output: object) -> dict:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output=output) == 200
    await gateway.settle()
    return await gateway.get(prediction["id"])


async def test_data_uri_outputs_become_owned_urls_with_recorded_sha256(gateway: GatewayHarness):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    done = await finish_with(
        gateway, {"image": data_uri("image/png", png), "text": data_uri("text/plain", b"hi")}
    )
    assert done["status"] == "succeeded"
    image_url = done["output"]["image"]
    assert image_url.startswith("https://gateway.test/assets/") and image_url.endswith(".png")
    path = image_url.removeprefix("https://gateway.test")
    response = await gateway.client.get(path)  # no token: capability URL
    assert response.status == 200
    assert await response.read() == png
    assert response.content_type == "image/png"
    async with gateway.store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(assets).order_by(assets.c.size_bytes))).all()
    assert [(r.content_type, r.size_bytes) for r in rows] == [("text/plain", 2), ("image/png", 208)]
    assert rows[1].sha256 == hashlib.sha256(png).hexdigest()


async def test_output_over_the_size_limit_fails_the_prediction(make_gateway):
    gateway = await make_gateway(gateway={"max_output_bytes": 10})
    done = await finish_with(gateway, data_uri("text/plain", b"x" * 11))
    assert done["status"] == "failed" and "limit is 10 bytes" in done["error"]
    assert done["output"] is None


async def test_output_of_a_refused_content_type_fails_the_prediction(make_gateway):
    gateway = await make_gateway(gateway={"allowed_output_types": ["image/*"]})
    done = await finish_with(gateway, [data_uri("image/png", b"ok"), data_uri("text/html", b"<")])
    assert done["status"] == "failed" and "text/html" in done["error"]


async def test_malformed_data_uri_fails_the_prediction_with_a_clear_error(gateway):
    done = await finish_with(gateway, "data:image/png;base64,@@not-base64@@")
    assert done["status"] == "failed" and "base64" in done["error"]


async def test_an_own_asset_url_that_was_never_uploaded_fails_the_prediction(
    gateway: GatewayHarness,
):
    """A provider that uploads its files (Cog's --upload-url, gateway/files/uploads.py) names
    them by their owned URLs; one the gateway never recorded is not a file it has."""
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    url = f"https://gateway.test/assets/{prediction['id']}/0123456789abcdef/out.bin"
    assert await gateway.deliver(prediction["id"], JobState.COMPLETED, output=[url]) == 200
    await gateway.settle()
    done = await gateway.get(prediction["id"])
    assert done["status"] == "failed" and "never reached owned storage" in done["error"]
    other = "https://gateway.test/assets/someone-else/0123456789abcdef/out.bin"
    assert (await finish_with(gateway, other))["output"] == other  # text, not this job's


async def test_asset_keys_cannot_escape_the_storage_directory(gateway: GatewayHarness):
    for path in ("/assets/../cutover.db", "/assets/%2e%2e/cutover.db", "/assets/a/../../x"):
        response = await gateway.client.get(path)
        assert response.status in {401, 404}, path
        assert b"SQLite" not in await response.read()
