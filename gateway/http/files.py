"""The Files API (docs/replicate-api.md §2.9; docs/files.md).

``POST /v1/files`` takes the multipart form both official clients send: ``content`` (the
file, with its name and type) and an optional ``metadata`` (a JSON string or JSON part),
in either order. The file streams into owned storage. ``GET /v1/files`` (newest first,
100 a page), ``GET|DELETE /v1/files/{id}`` and ``GET /v1/files/{id}/download`` act on
the calling token's own files. ``GET /file-downloads/{id}?expiry&signature`` serves a
signed download URL without a token (what providers are given).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from aiohttp import BodyPartReader, MultipartReader, web

from contracts.errors import ContractViolation
from contracts.times import parse_time
from gateway.files.outputs import MEDIA_TYPE_RE
from gateway.files.service import FileService, safe_name
from gateway.http import keys
from gateway.http.assets import serve_stored
from gateway.http.middleware import Handler, json_response, token_scope
from gateway.store.files import FileRecord

__all__ = ["FILES", "routes"]

routes = web.RouteTableDef()
FILES = web.AppKey("files", FileService)
PAGE_SIZE = 100
_MAX_METADATA_BYTES = 64 * 1024


def _both(method: str, path: str) -> Callable[[Handler], Handler]:
    """Served under ``/v1`` and without it, like every Replicate route (§1)."""

    def register(handler: Handler) -> Handler:
        for prefix in ("/v1", ""):
            routes.route(method, prefix + path)(handler)
        return handler

    return register


@_both("POST", "/files")
async def create_file(request: web.Request) -> web.Response:
    """Upload one file; 201 with the file object (413 past ``[files] max_bytes``)."""
    service = request.app[FILES]
    if not request.content_type.startswith("multipart/"):
        raise ContractViolation("upload a file as multipart/form-data with a 'content' part")
    try:
        reader = await request.multipart()
    except ValueError as exc:  # "boundary missed for Content-Type: multipart/form-data"
        raise _malformed(exc) from exc
    stored: FileRecord | None = None
    metadata: Any = {}
    try:
        while (part := await _next_part(reader)) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "content" and stored is None:
                stored = await service.store_content(
                    part.filename, _content_type(part), _chunks(part)
                )
            elif part.name == "metadata":
                metadata = await _metadata(part)
            else:
                await part.release()
        if stored is None:
            raise ContractViolation("the upload has no 'content' part")
    except BaseException:
        if stored is not None:
            await service.discard(stored)
        raise
    record = await service.add(stored, token_scope(request), metadata)
    return json_response(service.wire(record), status=201)


def _malformed(exc: ValueError) -> ContractViolation:
    """aiohttp's ValueError for a body that is not the multipart it claims: the client's
    422, not the gateway's 500 (docs/files.md)."""
    return ContractViolation(f"the multipart body is malformed: {exc}")


async def _next_part(reader: MultipartReader) -> Any:
    try:
        return await reader.next()
    except ValueError as exc:  # "Could not find starting boundary b'--xyz'"
        raise _malformed(exc) from exc


async def _read_chunk(part: BodyPartReader, size: int) -> bytes:
    try:
        return await part.read_chunk(size)
    except ValueError as exc:
        raise _malformed(exc) from exc


def _content_type(part: BodyPartReader) -> str:
    raw = part.headers.get("Content-Type", "").split(";")[0].strip().lower()
    return raw if MEDIA_TYPE_RE.match(raw) else "application/octet-stream"


async def _chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await _read_chunk(part, 1 << 16):
        yield chunk


async def _metadata(part: BodyPartReader) -> dict[str, Any]:
    """The ``metadata`` part: a JSON object (Replicate's file metadata); empty or ``null``
    is none (``{}``); anything else is 422 naming it (docs/files.md)."""
    raw = bytearray()
    while chunk := await _read_chunk(part, 1 << 14):
        raw += chunk
        if len(raw) > _MAX_METADATA_BYTES:
            raise ContractViolation(f"metadata is larger than {_MAX_METADATA_BYTES} bytes")
    if not raw.strip():
        return {}
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        raise ContractViolation("metadata is not valid JSON") from exc
    if metadata is None:  # a client serialising "no metadata"
        return {}
    if not isinstance(metadata, dict):
        raise ContractViolation(
            f"metadata must be a JSON object, not {type(metadata).__name__} (docs/files.md)"
        )
    return metadata


@_both("GET", "/files")
async def list_files(request: web.Request) -> web.Response:
    """The caller's files, newest first, with absolute ``next`` cursors."""
    service = request.app[FILES]
    before = _cursor(request.query.get("cursor"))
    found = await service.page(token_scope(request), before, PAGE_SIZE + 1)
    more, found = len(found) > PAGE_SIZE, found[:PAGE_SIZE]
    next_url = None
    if more:
        last = found[-1]
        raw = f"{last.created_at.isoformat()}|{last.id}".encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        base = request.app[keys.EDGE].public_url
        next_url = f"{base}/v1/files?{urlencode({'cursor': cursor})}"
    results = [service.wire(record) for record in found]
    return json_response({"next": next_url, "previous": None, "results": results})


def _cursor(value: str | None) -> tuple[datetime, str] | None:
    if not value:
        return None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        at, file_id = raw.split("|")
        return parse_time(at, "cursor", naive_is_utc=False), file_id
    except (ValueError, UnicodeDecodeError, binascii.Error, ContractViolation) as exc:
        raise ContractViolation(f"cursor {value!r} is not one this gateway issued") from exc


@_both("GET", "/files/{id}")
async def get_file(request: web.Request) -> web.Response:
    service = request.app[FILES]
    record = await service.get(request.match_info["id"], token_scope(request))
    return json_response(service.wire(record))


@_both("DELETE", "/files/{id}")
async def delete_file(request: web.Request) -> web.Response:
    await request.app[FILES].delete(request.match_info["id"], token_scope(request))
    return web.Response(status=204)


@_both("GET", "/files/{id}/download")
async def download_own_file(request: web.Request) -> web.StreamResponse:
    record = await request.app[FILES].get(request.match_info["id"], token_scope(request))
    return await serve_stored(request, record.storage_key, safe_name(record.name))


@routes.get("/file-downloads/{id}")
async def signed_download(request: web.Request) -> web.StreamResponse:
    """A signed download URL (no token): what a provider fetches for a file input."""
    record = await request.app[FILES].signed(
        request.match_info["id"],
        request.query.get("expiry", ""),
        request.query.get("signature", ""),
    )
    return await serve_stored(request, record.storage_key, safe_name(record.name))
