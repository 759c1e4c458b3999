"""The Files API in process, on both store backends (gateway/files/service.py, docs/files.md)."""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.support.gateway import VERSION, GatewayHarness

PAYLOAD = bytes(range(256)) * 40


def form(data: bytes = PAYLOAD, metadata: Any = None, first: str = "content") -> aiohttp.FormData:
    made = aiohttp.FormData()
    parts = [
        ("content", lambda: made.add_field(
            "content", data, filename="input.bin", content_type="application/octet-stream")),
        ("metadata", lambda: made.add_field("metadata", json.dumps(metadata or {"k": "v"}))),
    ]
    for _, add in sorted(parts, key=lambda p: p[0] != first):
        add()
    return made


async def upload(gateway: GatewayHarness, **kwargs: Any) -> dict[str, Any]:
    response = await gateway.client.post("/v1/files", data=form(**kwargs), headers=gateway.headers)
    assert response.status == 201, await response.text()
    return await response.json()


@pytest.mark.parametrize("first", ["content", "metadata"])
async def test_upload_gives_replicates_file_object(gateway: GatewayHarness, first: str) -> None:
    made = await upload(gateway, first=first)
    assert made["name"] == "input.bin"
    assert made["size"] == len(PAYLOAD)
    assert made["content_type"] == "application/octet-stream"
    assert made["checksums"]["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert made["etag"] and made["metadata"] == {"k": "v"}
    assert made["expires_at"] > made["created_at"]
    assert made["urls"]["get"] == f"https://gateway.test/v1/files/{made['id']}"
    got = await gateway.client.get(f"/v1/files/{made['id']}", headers=gateway.headers)
    assert await got.json() == made
    listed = await (await gateway.client.get("/v1/files", headers=gateway.headers)).json()
    assert [f["id"] for f in listed["results"]] == [made["id"]]
    download = await gateway.client.get(
        f"/v1/files/{made['id']}/download", headers=gateway.headers
    )
    assert await download.read() == PAYLOAD


async def test_files_belong_to_their_token(make_gateway: Any) -> None:
    gateway = await make_gateway(gateway={"api_tokens": ["r8_test_token", "r8_other_token"]})
    made = await upload(gateway)
    other = {"Authorization": "Bearer r8_other_token"}
    assert (await gateway.client.get(f"/v1/files/{made['id']}", headers=other)).status == 404
    listed = await (await gateway.client.get("/v1/files", headers=other)).json()
    assert listed["results"] == []
    assert (await gateway.client.delete(f"/v1/files/{made['id']}", headers=other)).status == 404


async def test_delete_removes_row_and_bytes(gateway: GatewayHarness) -> None:
    made = await upload(gateway)
    url = f"/v1/files/{made['id']}"
    assert (await gateway.client.delete(url, headers=gateway.headers)).status == 204
    assert (await gateway.client.get(url, headers=gateway.headers)).status == 404
    assert (await gateway.client.delete(url, headers=gateway.headers)).status == 404


async def test_too_large_is_413_and_nothing_is_kept(make_gateway: Any) -> None:
    gateway = await make_gateway(files={"max_bytes": 1000})
    response = await gateway.client.post("/v1/files", data=form(), headers=gateway.headers)
    assert response.status == 413
    assert response.content_type == "application/problem+json"
    listed = await (await gateway.client.get("/v1/files", headers=gateway.headers)).json()
    assert listed["results"] == []


async def test_expired_files_are_gone(make_gateway: Any) -> None:
    gateway = await make_gateway(files={"ttl_s": 0.001})
    made = await upload(gateway)
    response = await gateway.client.get(f"/v1/files/{made['id']}", headers=gateway.headers)
    assert response.status == 404


async def test_a_file_input_reaches_the_provider_as_a_signed_url(
    gateway: GatewayHarness,
) -> None:
    made = await upload(gateway)
    created = await gateway.create(
        {"version": VERSION, "input": {"prompt": "x", "image": made["urls"]["get"]}}
    )
    await gateway.settle()
    sent = gateway.fake.submitted[-1]
    assert sent.job_id == created["id"]
    fetched = urlsplit(sent.input["image"])
    assert fetched.path == f"/file-downloads/{made['id']}"
    # The provider fetches it without any token.
    answer = await gateway.client.get(f"{fetched.path}?{fetched.query}")
    assert answer.status == 200
    assert hashlib.sha256(await answer.read()).hexdigest() == made["checksums"]["sha256"]
    # ... and only with the right signature.
    forged = fetched.query.replace("signature=", "signature=0")
    assert (await gateway.client.get(f"{fetched.path}?{forged}")).status == 404
    # The app still sees the input it sent.
    assert (await gateway.get(created["id"]))["input"]["image"] == made["urls"]["get"]


async def test_upload_needs_a_token(gateway: GatewayHarness) -> None:
    assert (await gateway.client.post("/v1/files", data=form())).status == 401


@pytest.mark.parametrize(("content_type", "body", "says"), [
    ("multipart/form-data", b"garbage", "boundary missed"),
    ("multipart/form-data; boundary=xyz", b"garbage", "starting boundary"),
])
async def test_a_malformed_multipart_body_is_422_and_keeps_nothing(
    gateway: GatewayHarness, content_type: str, body: bytes, says: str,
) -> None:
    """Both were 500 "the gateway failed", aiohttp's ValueError logged as unhandled."""
    response = await gateway.client.post(
        "/v1/files", data=body, headers={**gateway.headers, "Content-Type": content_type}
    )
    assert response.status == 422, await response.text()
    problem = await response.json()
    assert "the multipart body is malformed" in problem["detail"] and says in problem["detail"]
    listed = await gateway.client.get("/v1/files", headers=gateway.headers)
    assert (await listed.json())["results"] == []


async def test_an_upload_the_storage_cannot_write_is_503_naming_why(
    make_gateway: Any, tmp_path: Any,
) -> None:
    """A storage directory under a file (a mistyped storage_url): it was a 500 "the
    gateway failed; see its logs"."""
    (tmp_path / "afile").write_text("")
    gateway = await make_gateway(gateway={"storage_url": f"file://{tmp_path}/afile/assets"})
    response = await gateway.client.post("/v1/files", data=form(), headers=gateway.headers)
    assert response.status == 503, await response.text()
    assert "Retry-After" in response.headers
    detail = (await response.json())["detail"]
    assert detail == "the upload could not be stored (NotADirectoryError); retry later"
    listed = await gateway.client.get("/v1/files", headers=gateway.headers)
    assert (await listed.json())["results"] == []


def raw_form(metadata: str | None) -> aiohttp.FormData:
    """A content part and, unless None, a metadata part sent as is (not JSON-encoded)."""
    made = aiohttp.FormData()
    made.add_field(
        "content", PAYLOAD, filename="input.bin", content_type="application/octet-stream"
    )
    if metadata is not None:
        made.add_field("metadata", metadata)
    return made


@pytest.mark.parametrize("metadata", ["[1]", '"x"', "3", "true"])
async def test_metadata_that_is_not_a_json_object_is_422_naming_it(
    gateway: GatewayHarness, metadata: str,
) -> None:
    """Replicate's file metadata is an object (docs/files.md); a list, string or number
    was stored and echoed back as the file's metadata."""
    response = await gateway.client.post(
        "/v1/files", data=raw_form(metadata), headers=gateway.headers
    )
    assert response.status == 422, await response.text()
    assert response.content_type == "application/problem+json"
    assert "metadata" in (await response.json())["detail"]
    listed = await gateway.client.get("/v1/files", headers=gateway.headers)
    assert (await listed.json())["results"] == []


@pytest.mark.parametrize(("metadata", "kept"), [
    (None, {}), ("", {}), ("null", {}), ('{"a": [1]}', {"a": [1]}),
])
async def test_metadata_absent_or_an_object_is_kept(
    gateway: GatewayHarness, metadata: str | None, kept: dict[str, Any],
) -> None:
    """JSON null (a client serialising "no metadata") is taken as absent."""
    response = await gateway.client.post(
        "/v1/files", data=raw_form(metadata), headers=gateway.headers
    )
    assert response.status == 201, await response.text()
    assert (await response.json())["metadata"] == kept
