"""The Files API without HTTP: upload, read, list, delete, sign, resolve (docs/files.md).

Uploads stream into owned storage under ``files/<id>/<name>`` (never whole in memory),
with their SHA-256 and MD5, and a row owned by the uploading API token; they expire after
``[files] ttl_s``. The object apps see follows docs/replicate-api.md §2.9 (with the
``name`` and ``etag`` the Python client requires). ``urls.get`` is the authenticated API
URL ``{public_url}/v1/files/{id}``; when such a URL appears in a prediction input, the
dispatcher hands the provider a signed download URL on the gateway instead
(:meth:`FileService.resolve_input`), which the provider fetches without a token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import re
from collections.abc import AsyncIterable, Collection
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from contracts.auth import same_secret
from contracts.errors import NotFound, ServiceUnavailable
from gateway import ids, wire
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.storage import Storage
from gateway.store.files import FileRecord, FileStore

__all__ = ["FileService", "safe_name"]

log = logging.getLogger(__name__)

_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME_CHARS = 100


def safe_name(name: str | None) -> str:
    """A storage-safe version of an uploaded file's name (``file`` when nothing is left)."""
    cleaned = _NAME_CHARS.sub("_", (name or "").rsplit("/", 1)[-1]).strip("._")
    return cleaned[:_MAX_NAME_CHARS] or "file"


class FileService:
    """Parameters: the row store, owned storage, the public and provider-facing base URLs,
    the secret download URLs are signed with, and the lifetimes in seconds."""

    def __init__(
        self,
        *,
        store: FileStore,
        storage: Storage,
        public_url: str,
        provider_base_url: str,
        secret: str,
        ttl_s: float,
        max_bytes: int,
        download_ttl_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._storage = storage
        self._public_url = public_url
        self._provider_base_url = provider_base_url
        self._secret = secret.encode()
        self._ttl = timedelta(seconds=ttl_s)
        self.max_bytes = max_bytes
        self._download_ttl_s = download_ttl_s
        self._clock = clock
        self._get_url_re = re.compile(
            rf"^{re.escape(public_url)}(?:/v1)?/files/(?P<id>[a-z0-9]{{26}})$"
        )

    async def store_content(
        self, name: str | None, content_type: str, chunks: AsyncIterable[bytes]
    ) -> FileRecord:
        """Stream an upload's bytes into storage; the record to :meth:`add` (unsaved).

        Raises
        ------
        StorageTooLarge
            More than ``max_bytes`` arrived (413); nothing is kept.
        """
        file_id = ids.new_prediction_id()
        key = f"files/{file_id}/{safe_name(name)}"
        try:
            written = await self._storage.put_stream(
                key, chunks, content_type=content_type, max_bytes=self.max_bytes
            )
        except OSError as exc:
            if isinstance(exc, ConnectionError):  # the client went away mid-upload
                raise
            # a storage directory it cannot write: a 500 "the gateway failed" before
            log.warning("upload_not_stored", extra={"error": repr(exc)})
            raise ServiceUnavailable(
                f"the upload could not be stored ({type(exc).__name__}); retry later"
            ) from exc
        now = self._clock.now()
        return FileRecord(
            id=file_id, owner="", name=name or safe_name(name), content_type=content_type,
            size_bytes=written.size_bytes, sha256=written.sha256, md5=written.md5,
            storage_key=key, metadata={}, created_at=now, expires_at=now + self._ttl,
        )

    async def add(self, record: FileRecord, owner: str, metadata: Any) -> FileRecord:
        """Record a stored upload for ``owner`` (its bytes are removed if that fails)."""
        record = dataclasses.replace(record, owner=owner, metadata=metadata)
        try:
            await self._store.insert(record)
        except BaseException:
            await self.discard(record)
            raise
        return record

    async def discard(self, record: FileRecord) -> None:
        """Remove the bytes of an upload that will not be recorded."""
        await self._storage.delete(record.storage_key)

    async def get(self, file_id: str, owner: str) -> FileRecord:
        """The caller's unexpired file; ``NotFound`` otherwise."""
        found = await self._store.get(file_id, owner) if _is_id(file_id) else None
        if found is None or found.expires_at <= self._clock.now():
            raise NotFound(f"file {file_id!r} does not exist")
        return found

    async def page(self, owner: str, before: tuple[datetime, str] | None, limit: int) -> list[
        FileRecord
    ]:
        now = self._clock.now()
        return [f for f in await self._store.page(owner, before, limit) if f.expires_at > now]

    async def delete(self, file_id: str, owner: str) -> None:
        """Remove the caller's file, row then bytes; ``NotFound`` when it has none."""
        found = await self._store.delete(file_id, owner) if _is_id(file_id) else None
        if found is None:
            raise NotFound(f"file {file_id!r} does not exist")
        await self._storage.delete(found.storage_key)

    async def prune(self, limit: int = 500) -> int:
        """Delete up to ``limit`` expired files (rows and bytes); how many went."""
        gone = 0
        for record in await self._store.expired(self._clock.now(), limit):
            if await self._store.delete(record.id) is not None:
                await self._storage.delete(record.storage_key)
                gone += 1
        return gone

    def wire(self, record: FileRecord) -> dict[str, Any]:
        """The file object of §2.9."""
        return {
            "id": record.id,
            "name": record.name,
            "content_type": record.content_type,
            "size": record.size_bytes,
            "etag": record.md5,
            "checksums": {"sha256": record.sha256, "md5": record.md5},
            "metadata": record.metadata,
            "created_at": wire.timestamp(record.created_at),
            "expires_at": wire.timestamp(record.expires_at),
            "urls": {"get": f"{self._public_url}/v1/files/{record.id}"},
        }

    # --- signed downloads ----------------------------------------------------------------

    def _signature(self, file_id: str, expiry: int) -> str:
        message = f"{file_id} {expiry}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def download_url(self, file_id: str, base_url: str | None = None) -> str:
        """A URL that serves the file's bytes without a token until it expires."""
        expiry = int(self._clock.now().timestamp() + self._download_ttl_s)
        query = urlencode({"expiry": expiry, "signature": self._signature(file_id, expiry)})
        return f"{base_url or self._public_url}/file-downloads/{file_id}?{query}"

    async def signed(self, file_id: str, expiry: str, signature: str) -> FileRecord:
        """The file a signed download URL names; ``NotFound`` for a bad or old signature."""
        try:
            when = int(expiry)
        except ValueError:
            when = 0
        valid = _is_id(file_id) and same_secret(
            signature, self._signature(file_id, when)
        )
        if not valid or when < self._clock.now().timestamp():
            raise NotFound(f"file {file_id!r} does not exist")
        found = await self._store.get_any(file_id)
        if found is None or found.expires_at <= self._clock.now():
            raise NotFound(f"file {file_id!r} does not exist")
        return found

    def resolve_input(self, value: Any) -> Any:
        """``value`` with every ``urls.get`` of a gateway file replaced by a signed URL the
        provider can fetch (on the provider-facing base URL)."""
        if isinstance(value, str):
            match = self._get_url_re.match(value)
            if match is None:
                return value
            return self.download_url(match.group("id"), self._provider_base_url)
        if isinstance(value, list):
            return [self.resolve_input(item) for item in value]
        if isinstance(value, dict):
            return {key: self.resolve_input(item) for key, item in value.items()}
        return value


    async def check_owned(self, value: Any, owners: Collection[str]) -> None:
        """Refuse an input naming a gateway file (its ``urls.get``) no owner in ``owners``
        uploaded (another tenant's, or none: docs/security.md).

        Raises
        ------
        NotFound
            Naming the first such file, as the Files API answers for it.
        """
        for file_id in sorted(self._named_files(value)):
            found = await self._store.get_any(file_id)
            if found is None or found.owner not in owners:
                raise NotFound(f"the input names file {file_id!r}, which does not exist")

    def _named_files(self, value: Any) -> set[str]:
        if isinstance(value, str):
            match = self._get_url_re.match(value)
            return set() if match is None else {match.group("id")}
        items = value.values() if isinstance(value, dict) else value
        if not isinstance(value, list | dict):
            return set()
        return set().union(*(self._named_files(item) for item in items))


def _is_id(value: str) -> bool:
    return ids.PREDICTION_ID_RE.match(value) is not None
