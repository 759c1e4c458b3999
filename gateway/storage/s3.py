"""An S3-compatible bucket as owned storage (``storage_url = "s3://bucket/prefix"``).

The endpoint, region and credentials come from ``[storage]`` in the configuration or,
when unset there, from the standard AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``...), read by
botocore when the client is first used (never in the constructor). Streams are written as
one ``PutObject`` when they fit one part, else as a multipart upload holding one part
(``part_size_bytes``, at least 5 MiB as S3 requires) in memory at a time; a failed upload
is aborted so no orphan parts are billed. See docs/storage.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from contracts.errors import ServiceUnavailable
from gateway.storage.base import (
    CHUNK_BYTES,
    MIN_PART_BYTES,
    PART_SIZE_BYTES,
    Digest,
    StoredObject,
    Written,
    check_key,
)

__all__ = ["MIN_PART_BYTES", "S3Storage"]

_MISSING = {"404", "NoSuchKey", "NotFound"}


class S3Storage:
    """Objects under ``s3://bucket/prefix``.

    Parameters
    ----------
    bucket, prefix : str
        Where keys live: ``<prefix>/<key>`` in ``bucket`` (an empty prefix means the root).
    endpoint_url, region : str or None
        An S3-compatible endpoint (MinIO, moto, R2...) and region; None lets botocore
        read them from the environment.
    access_key_id, secret_access_key : str or None
        Credentials; None lets botocore find them (environment, profile, instance role).
    part_size_bytes : int
        Size of one multipart part, the most held in memory per upload (>= 5 MiB).
    """

    fsync = False  # an object is stored once its upload completes; its spool is removed

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        part_size_bytes: int = PART_SIZE_BYTES,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client_args: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region_name": region,
            "aws_access_key_id": access_key_id,
            "aws_secret_access_key": secret_access_key,
            # Completing a large multipart upload can take a minute on some servers.
            "config": Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                read_timeout=300,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        }
        self.part_size_bytes = max(part_size_bytes, MIN_PART_BYTES)
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._lock = asyncio.Lock()

    def _name(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    async def _s3(self) -> Any:
        async with self._lock:
            if self._client is None:
                creator = get_session().create_client("s3", **self._client_args)
                self._client = await self._stack.enter_async_context(creator)
        return self._client

    async def put(self, key: str, data: bytes, content_type: str = "") -> None:
        s3 = await self._s3()
        extra = {"ContentType": content_type} if content_type else {}
        with _unavailable():
            await s3.put_object(Bucket=self.bucket, Key=self._name(key), Body=data, **extra)

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = "",
        max_bytes: int | None = None,
    ) -> Written:
        name = self._name(key)
        digest = Digest(max_bytes)
        buffer = bytearray()
        iterator = aiter(chunks)
        async for chunk in iterator:
            digest.update(chunk)
            buffer += chunk
            if len(buffer) >= self.part_size_bytes:
                await self._multipart(name, buffer, iterator, digest, content_type)
                return digest.result()
        await self.put(key, bytes(buffer), content_type)
        return digest.result()

    async def _multipart(
        self,
        name: str,
        buffer: bytearray,
        rest: AsyncIterator[bytes],
        digest: Digest,
        content_type: str,
    ) -> None:
        s3 = await self._s3()
        extra = {"ContentType": content_type} if content_type else {}
        with _unavailable():
            upload = await s3.create_multipart_upload(Bucket=self.bucket, Key=name, **extra)
        upload_id = upload["UploadId"]
        parts: list[dict[str, Any]] = []

        async def send(data: bytes) -> None:
            number = len(parts) + 1
            with _unavailable():
                answer = await s3.upload_part(
                    Bucket=self.bucket, Key=name, UploadId=upload_id, PartNumber=number, Body=data
                )
            parts.append({"ETag": answer["ETag"], "PartNumber": number})

        try:
            async for chunk in rest:
                digest.update(chunk)
                buffer += chunk
                while len(buffer) >= self.part_size_bytes:
                    await send(bytes(buffer[: self.part_size_bytes]))
                    del buffer[: self.part_size_bytes]
            if buffer or not parts:
                await send(bytes(buffer))
            with _unavailable():
                await s3.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=name,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            with contextlib.suppress(BotoCoreError, ClientError):
                await s3.abort_multipart_upload(Bucket=self.bucket, Key=name, UploadId=upload_id)
            raise

    def temp_path(self) -> Path:
        """A spool file in the system's temporary directory (the bucket has no local
        file system); :meth:`put_file` uploads it in parts and the caller removes it."""
        incoming = Path(tempfile.gettempdir()) / "cutover-incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        return incoming / secrets.token_hex(16)

    async def put_file(self, key: str, path: Path) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            handle = await asyncio.to_thread(path.open, "rb")
            with handle:
                while chunk := await asyncio.to_thread(handle.read, 1 << 20):
                    yield chunk

        await self.put_stream(key, chunks())

    async def stat(self, key: str) -> StoredObject | None:
        try:
            name = self._name(key)
        except ValueError:
            return None
        s3 = await self._s3()
        try:
            head = await s3.head_object(Bucket=self.bucket, Key=name)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise ServiceUnavailable("object storage is unavailable") from exc
        return StoredObject(
            key=key,
            size_bytes=int(head["ContentLength"]),
            content_type=head.get("ContentType") or "application/octet-stream",
        )

    async def read(self, key: str) -> AsyncIterator[bytes]:
        try:
            name = self._name(key)
        except ValueError as exc:
            raise FileNotFoundError(key) from exc
        s3 = await self._s3()
        try:
            answer = await s3.get_object(Bucket=self.bucket, Key=name)
        except ClientError as exc:
            if _missing(exc):
                raise FileNotFoundError(key) from exc
            raise ServiceUnavailable("object storage is unavailable") from exc
        async with answer["Body"] as body:
            while chunk := await body.read(CHUNK_BYTES):
                yield chunk

    async def delete(self, key: str) -> None:
        try:
            name = self._name(key)
        except ValueError:
            return
        s3 = await self._s3()
        with _unavailable():
            await s3.delete_object(Bucket=self.bucket, Key=name)

    async def presign(self, key: str, expires_s: float) -> str | None:
        s3 = await self._s3()
        url: str = await s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._name(key)},
            ExpiresIn=max(1, int(expires_s)),
        )
        return url

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._client = None


def _missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in _MISSING


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Map botocore failures to one retryable gateway error (docs/architecture.md, rule 5)."""
    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        raise ServiceUnavailable(f"object storage failed: {type(exc).__name__}") from exc
