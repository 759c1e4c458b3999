"""Copy a prediction's output files into owned storage (DESIGN invariant 4).

Every string in the output that is a ``data:`` URI or an ``http(s)`` URL is treated as a
file: its bytes are read (decoded, or downloaded with a size cap), checked against the
allowed content types and the maximum size, stored under a key the gateway controls, and
replaced in the output by the gateway's own URL (``{public_url}/assets/{key}``), which
apps can read with or without a Bearer token (specs/replicate-api.md §8.4).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import mimetypes
import posixpath
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import httpx

from contracts.errors import CutoverError
from gateway.storage import Storage
from gateway.store import AssetRecord

__all__ = ["AssetError", "OutputCopier", "parse_data_uri"]


class AssetError(CutoverError):
    """An output file could not be copied (bad data URI, too large, refused type...)."""

    status = 502
    title = "Output file could not be stored"


def parse_data_uri(uri: str) -> tuple[str, bytes]:
    """``(content_type, bytes)`` of an RFC 2397 ``data:`` URI.

    Raises
    ------
    AssetError
        When the URI is malformed or its base64 does not decode.
    """
    header, comma, payload = uri[5:].partition(",")
    if not comma:
        raise AssetError("output data: URI has no comma")
    params = header.split(";")
    is_base64 = params[-1].lower() == "base64"
    if is_base64:
        params = params[:-1]
    content_type = params[0] or "text/plain"
    try:
        data = base64.b64decode(payload, validate=True) if is_base64 else unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise AssetError(f"output data: URI is not valid base64: {exc}") from exc
    return content_type.strip().lower(), data


@dataclass(frozen=True)
class _File:
    data: bytes
    content_type: str
    name: str | None
    source: str


class OutputCopier:
    """Rewrites file outputs to owned URLs.

    Parameters
    ----------
    storage : Storage
        Where the bytes go.
    http : httpx.AsyncClient
        For downloading provider-hosted outputs (owned by the caller).
    public_url : str
        The gateway's public base URL.
    max_output_bytes : int
        Largest single file accepted, in bytes.
    allowed_types : list of str
        Glob patterns of accepted content types (``image/*``); empty accepts all.
    """

    def __init__(
        self,
        *,
        storage: Storage,
        http: httpx.AsyncClient,
        public_url: str,
        max_output_bytes: int,
        allowed_types: list[str],
    ) -> None:
        self._storage = storage
        self._http = http
        self._public_url = public_url
        self._max = max_output_bytes
        self._allowed = allowed_types

    async def copy(self, job_id: str, output: Any) -> tuple[Any, list[AssetRecord]]:
        """The output with every file replaced by its owned URL, and the stored files."""
        records: dict[str, AssetRecord] = {}
        rewritten = await self._walk(job_id, output, records)
        return rewritten, list(records.values())

    async def _walk(self, job_id: str, value: Any, records: dict[str, AssetRecord]) -> Any:
        if isinstance(value, str) and _is_file(value):
            return await self._store(job_id, value, records)
        if isinstance(value, list):
            return [await self._walk(job_id, item, records) for item in value]
        if isinstance(value, dict):
            return {k: await self._walk(job_id, v, records) for k, v in value.items()}
        return value

    async def _store(self, job_id: str, ref: str, records: dict[str, AssetRecord]) -> str:
        file = await self._read(ref)
        if len(file.data) > self._max:
            raise AssetError(
                f"an output file is {len(file.data)} bytes; the limit is {self._max} bytes"
            )
        if self._allowed and not any(fnmatch.fnmatch(file.content_type, p) for p in self._allowed):
            raise AssetError(f"output content type {file.content_type!r} is not allowed")
        sha256 = hashlib.sha256(file.data).hexdigest()
        key = f"{job_id}/{sha256[:16]}/{_name(file)}"
        if key not in records:
            await self._storage.put(key, file.data)
            records[key] = AssetRecord(
                key=key,
                sha256=sha256,
                size_bytes=len(file.data),
                content_type=file.content_type,
                source=file.source,
            )
        return f"{self._public_url}/assets/{key}"

    async def _read(self, ref: str) -> _File:
        if ref.startswith("data:"):
            content_type, data = parse_data_uri(ref)
            return _File(data, content_type, None, "data")
        try:
            async with self._http.stream("GET", ref, follow_redirects=True) as response:
                response.raise_for_status()
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self._max:
                        raise AssetError(f"an output file exceeds the limit of {self._max} bytes")
                    chunks.append(chunk)
                content_type = response.headers.get("content-type", "application/octet-stream")
        except httpx.HTTPError as exc:
            raise AssetError(f"could not download an output file: {exc}") from exc
        name = posixpath.basename(urlsplit(ref).path) or None
        return _File(b"".join(chunks), content_type.split(";")[0].strip().lower(), name, "url")


def _is_file(value: str) -> bool:
    return value.startswith(("data:", "https://", "http://"))


def _name(file: _File) -> str:
    if file.name and all(c.isalnum() or c in "._-" for c in file.name) and file.name[0] != ".":
        return file.name
    extension = mimetypes.guess_extension(file.content_type) or ".bin"
    return f"output{extension}"
