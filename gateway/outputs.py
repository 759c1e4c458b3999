"""Copy a prediction's output files into owned storage (DESIGN invariant 4).

Which strings in an output are files:

* a well-formed RFC 2397 ``data:`` URI (``data:<type>/<subtype>[;param=value]*[;base64],``)
  is decoded; a string that merely starts with ``data:`` is text;
* an ``http(s)`` URL is downloaded only when its host is one of the provider's declared
  ``file_hosts`` (where that provider uploads outputs, e.g. Cog's ``--upload-url``):
  any other URL is the model's text, never fetched, so a model cannot make the gateway
  read internal addresses (server-side request forgery). Downloads follow no redirect,
  use no proxy from the environment, and have a total deadline and a size cap.

Each file is checked against the allowed content types and the maximum size, stored
under a key the gateway controls (``<prediction id>/<sha256 prefix>/<name>``), and
replaced in the output by the gateway's own URL (``{public_url}/assets/{key}``), which
apps can read with or without a Bearer token (specs/replicate-api.md §8.4).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import fnmatch
import hashlib
import mimetypes
import posixpath
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import httpx

from contracts.errors import CutoverError
from gateway.storage import Storage
from gateway.store.jobs import AssetRecord

__all__ = ["MEDIA_TYPE_RE", "AssetError", "OutputCopier", "parse_data_uri"]

_NAME = r"[A-Za-z0-9!#$&^_.+-]{1,64}"
MEDIA_TYPE_RE = re.compile(rf"^{_NAME}/{_NAME}$")
_DATA_URI_RE = re.compile(
    rf"^data:(?P<type>{_NAME}/{_NAME})?(?P<params>(?:;{_NAME}=[^;,\s]{{0,128}})*)"
    r"(?P<base64>;base64)?,",
    re.IGNORECASE,
)
_MAX_NAME_CHARS = 100


class AssetError(CutoverError):
    """An output file could not be copied (bad data URI, too large, refused type...)."""

    status = 502
    title = "Output file could not be stored"


def parse_data_uri(uri: str) -> tuple[str, bytes]:
    """``(content_type, bytes)`` of an RFC 2397 ``data:`` URI.

    The content type is lower-case and a valid media type (``text/plain`` when absent).

    Raises
    ------
    AssetError
        When the URI is malformed or its base64 does not decode.
    """
    match = _DATA_URI_RE.match(uri)
    if match is None:
        raise AssetError("output is not a well-formed data: URI")
    payload = uri[match.end() :]
    try:
        data = (
            base64.b64decode(payload, validate=True)
            if match.group("base64")
            else unquote_to_bytes(payload)
        )
    except (binascii.Error, ValueError) as exc:
        raise AssetError(f"output data: URI is not valid base64: {exc}") from exc
    return (match.group("type") or "text/plain").lower(), data


def is_data_uri(value: str) -> bool:
    """Whether ``value`` is a well-formed ``data:`` URI (so a file, not text)."""
    return _DATA_URI_RE.match(value) is not None


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
    download_timeout_s : float
        Deadline of one whole download, in seconds.
    """

    def __init__(
        self,
        *,
        storage: Storage,
        http: httpx.AsyncClient,
        public_url: str,
        max_output_bytes: int,
        allowed_types: list[str],
        download_timeout_s: float = 60.0,
    ) -> None:
        self._storage = storage
        self._http = http
        self._public_url = public_url
        self._max = max_output_bytes
        self._allowed = allowed_types
        self._download_timeout_s = download_timeout_s

    async def copy(
        self, job_id: str, output: Any, file_hosts: Collection[str] = ()
    ) -> tuple[Any, list[AssetRecord]]:
        """The output with every file replaced by its owned URL, and the stored files.

        ``file_hosts``: host names whose ``http(s)`` URLs are the provider's output files.

        Raises
        ------
        AssetError
            A file could not be read, is too large, or has a refused content type.
        """
        records: dict[str, AssetRecord] = {}
        hosts = {h.lower() for h in file_hosts}
        rewritten = await self._walk(job_id, output, records, hosts)
        return rewritten, list(records.values())

    async def _walk(
        self, job_id: str, value: Any, records: dict[str, AssetRecord], hosts: set[str]
    ) -> Any:
        if isinstance(value, str) and _is_file(value, hosts):
            return await self._store(job_id, value, records)
        if isinstance(value, list):
            return [await self._walk(job_id, item, records, hosts) for item in value]
        if isinstance(value, dict):
            return {k: await self._walk(job_id, v, records, hosts) for k, v in value.items()}
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
            async with asyncio.timeout(self._download_timeout_s):
                return await self._download(ref)
        except TimeoutError as exc:
            raise AssetError(
                f"an output file did not download within {self._download_timeout_s:.0f} s"
            ) from exc

    async def _download(self, ref: str) -> _File:
        try:
            async with self._http.stream("GET", ref, follow_redirects=False) as response:
                if response.status_code != 200:
                    raise AssetError(
                        f"could not download an output file: HTTP {response.status_code}"
                    )
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self._max:
                        raise AssetError(f"an output file exceeds the limit of {self._max} bytes")
                    chunks.append(chunk)
                raw_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            raise AssetError(f"could not download an output file: {type(exc).__name__}") from exc
        content_type = raw_type if MEDIA_TYPE_RE.match(raw_type) else "application/octet-stream"
        name = posixpath.basename(urlsplit(ref).path) or None
        return _File(b"".join(chunks), content_type, name, "url")


def _is_file(value: str, hosts: set[str]) -> bool:
    if value.startswith("data:"):
        return is_data_uri(value)
    if not hosts or not value.startswith(("https://", "http://")):
        return False
    try:
        host = urlsplit(value).hostname
    except ValueError:
        return False
    return host is not None and host.lower() in hosts


def _name(file: _File) -> str:
    name = file.name
    if (
        name
        and len(name) <= _MAX_NAME_CHARS
        and name[0] != "."
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    ):
        return name
    extension = mimetypes.guess_extension(file.content_type) or ".bin"
    return f"output{extension}"
