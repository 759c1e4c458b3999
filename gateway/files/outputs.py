"""Copy a prediction's output files into owned storage (docs/architecture.md, invariant 4).

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
apps can read with or without a Bearer token (docs/replicate-api.md §8.4).
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
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes, urlsplit

from contracts.errors import CutoverError
from gateway.files.download import DownloadFailed, download, remove
from gateway.storage import Storage
from gateway.store.jobs import AssetRecord

__all__ = [
    "MEDIA_TYPE_RE",
    "AssetError",
    "OutputCopier",
    "asset_key",
    "has_files",
    "off_loop",
    "parse_data_uri",
]

_NAME = r"[A-Za-z0-9!#$&^_.+-]{1,64}"
MEDIA_TYPE_RE = re.compile(rf"^{_NAME}/{_NAME}$")
_DATA_URI_RE = re.compile(
    rf"^data:(?P<type>{_NAME}/{_NAME})?(?P<params>(?:;{_NAME}=[^;,\s]{{0,128}})*)"
    r"(?P<base64>;base64)?,",
    re.IGNORECASE,
)
_MAX_NAME_CHARS = 100
T = TypeVar("T")


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
    """A file read from an output: in memory (``data:`` URIs, already part of the output)
    or spooled to a temporary file of the storage (downloads), hashed as it was read."""

    content_type: str
    name: str | None
    source: str
    sha256: str
    size: int
    data: bytes | None = None
    path: Path | None = None

    @classmethod
    def of_bytes(cls, data: bytes, content_type: str, source: str) -> _File:
        digest = hashlib.sha256(data).hexdigest()
        return cls(content_type, None, source, digest, len(data), data=data)


class OutputCopier:
    """Rewrites file outputs to owned URLs.

    Parameters
    ----------
    storage : Storage
        Where the bytes go.
    public_url : str
        The gateway's public base URL.
    max_output_bytes : int
        Largest single file accepted, in bytes.
    allowed_types : list of str
        Glob patterns of accepted content types (``image/*``); empty accepts all.
    download_timeout_s : float
        Deadline of one whole download, in seconds.
    recorded : callable or None
        ``await recorded(job_id)``: the keys of the files already recorded for a job (a
        provider uploaded them to the gateway, gateway/files/uploads.py). An output naming
        one of the job's own asset URLs that is not among them fails the copy: Cog
        reports an upload's URL even when the upload failed (docs/cog.md §1.10).
    """

    def __init__(
        self,
        *,
        storage: Storage,
        public_url: str,
        max_output_bytes: int,
        allowed_types: list[str],
        download_timeout_s: float,
        recorded: Callable[[str], Awaitable[Collection[str]]] | None = None,
    ) -> None:
        self._storage = storage
        self._recorded = recorded
        self.max_output_bytes = max_output_bytes
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
        await self._check_uploaded(job_id, rewritten, records)
        return rewritten, list(records.values())

    def asset_url(self, key: str) -> str:
        """The owned URL apps read ``key`` from."""
        return f"{self._public_url}/assets/{key}"

    async def _check_uploaded(
        self, job_id: str, output: Any, records: dict[str, AssetRecord]
    ) -> None:
        """Every URL of the job's own assets in ``output`` that this copy did not make
        must be a recorded upload."""
        prefix = self.asset_url(f"{job_id}/")
        claimed = {
            url.removeprefix(self.asset_url(""))
            for url in _strings(output)
            if url.startswith(prefix)
        } - records.keys()
        if not claimed:
            return
        known = set(await self._recorded(job_id)) if self._recorded is not None else set()
        if claimed - known:
            raise AssetError(
                "an output file never reached owned storage: the provider's upload of it "
                "failed or was refused (the gateway's log says why)"
            )

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
        try:
            if file.size > self._max:
                raise AssetError(
                    f"an output file is {file.size} bytes; the limit is {self._max} bytes"
                )
            self._check_type(file.content_type)
            key = asset_key(job_id, file.sha256, file.name, file.content_type)
            if key not in records:
                if file.path is not None:
                    await self._storage.put_file(key, file.path)
                else:
                    await self._storage.put(key, file.data or b"")
                records[key] = AssetRecord(
                    key=key,
                    sha256=file.sha256,
                    size_bytes=file.size,
                    content_type=file.content_type,
                    source=file.source,
                )
        finally:
            if file.path is not None:
                await remove(file.path)
        return self.asset_url(key)

    def _check_type(self, content_type: str) -> None:
        if self._allowed and not any(fnmatch.fnmatch(content_type, p) for p in self._allowed):
            raise AssetError(f"output content type {content_type!r} is not allowed")

    async def _read(self, ref: str) -> _File:
        if ref.startswith("data:"):
            content_type, data = await off_loop(parse_data_uri, ref, size=len(ref))
            return await off_loop(_File.of_bytes, data, content_type, "data", size=len(data))
        try:
            async with asyncio.timeout(self._download_timeout_s):
                return await self._download(ref)
        except TimeoutError as exc:
            raise AssetError(
                f"an output file did not download within {self._download_timeout_s:.0f} s"
            ) from exc

    async def _download(self, ref: str) -> _File:
        """Download ``ref`` into a temporary file of the storage, hashing as it goes
        (gateway/files/download.py): memory stays flat whatever the size; the file is refused
        as soon as its type or its size is known to be wrong."""
        path = self._storage.temp_path()
        try:
            got = await download(
                ref, path, max_bytes=self._max, timeout_s=self._download_timeout_s,
                accept=self.accept, write_back=self._storage.fsync,
            )
        except BaseException as exc:
            await remove(path)
            if isinstance(exc, DownloadFailed):
                reason = str(exc)
                if "exceeds the limit" not in reason:
                    reason = f"could not download an output file: {reason}"
                raise AssetError(reason) from exc
            raise
        name = posixpath.basename(urlsplit(ref).path) or None
        return _File(got.content_type, name, "url", got.sha256, got.size, path=path)

    def accept(self, raw: str) -> str:
        """The content type to record for a ``Content-Type`` header (a download's, an
        upload's); AssetError when it is refused."""
        raw_type = raw.split(";")[0].strip().lower()
        content_type = raw_type if MEDIA_TYPE_RE.match(raw_type) else "application/octet-stream"
        self._check_type(content_type)
        return content_type


INLINE_BYTES = 64 * 1024  # work on more than this runs on a worker thread


async def off_loop(function: Callable[..., T], *args: Any, size: int) -> T:
    """``function(*args)``, on a worker thread when ``size`` (bytes or characters) is
    over :data:`INLINE_BYTES`: decoding and hashing up to ``max_output_bytes`` must not
    stall every other request (docs/storage.md, "Threads")."""
    if size > INLINE_BYTES:
        return await asyncio.to_thread(function, *args)
    return function(*args)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def has_files(value: Any, file_hosts: Collection[str] = ()) -> bool:
    """Whether ``value`` (an output) holds a file :meth:`OutputCopier.copy` would copy."""
    hosts = {h.lower() for h in file_hosts}
    if isinstance(value, str):
        return _is_file(value, hosts)
    if isinstance(value, list):
        return any(has_files(item, hosts) for item in value)
    if isinstance(value, dict):
        return any(has_files(item, hosts) for item in value.values())
    return False


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


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def asset_key(job_id: str, sha256: str, name: str | None, content_type: str) -> str:
    """The storage key of a job's output file: ``<job id>/<sha256 prefix>/<name>``, the
    name kept when it is short, plain ASCII and not hidden, else ``output.<ext>``."""
    return f"{job_id}/{sha256[:16]}/{_name(name, content_type)}"


def _name(name: str | None, content_type: str) -> str:
    if (
        name
        and len(name) <= _MAX_NAME_CHARS
        and name[0] != "."
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    ):
        return name
    extension = mimetypes.guess_extension(content_type) or ".bin"
    return f"output{extension}"
