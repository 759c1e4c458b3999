"""The gateway as Cog's ``--upload-url``: output files stream straight into owned storage.

Started with ``--upload-url {callback_url}/provider-uploads/{provider}/{upload_token}/``, a
Cog server ``PUT``s each output file of a prediction to that URL plus the file's name,
with the file's ``Content-Type``, its ``Content-Length`` and the prediction's id in
``X-Prediction-Id``, and puts the answer's ``Location`` (without its query) in the
prediction's output in place of the file (docs/cog.md §1.10). So the bytes never travel
through a webhook body or the database: they are spooled to a temporary file as they
arrive, hashed on the way (gateway/files/download.py), moved (a local directory) or uploaded in
parts (S3) under the key the output copier would have chosen, and recorded as the
prediction's asset before the ``Location`` (its ``/assets/`` URL) is answered.

Only the provider's server can upload: the path carries the provider's
``upload_token`` (compared in constant time) and the prediction must be one of that
provider's. A file over ``max_output_bytes`` or of a refused content type is refused
(413, 415); Cog ignores a failed upload and reports the URL anyway, so the output copier
fails a prediction whose output names an upload that was never recorded
(:meth:`gateway.files.outputs.OutputCopier.copy`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Mapping

from contracts.auth import same_secret
from contracts.errors import CutoverError, NotFound, PayloadTooLarge
from gateway.files.download import DownloadFailed, Spool, remove
from gateway.files.outputs import AssetError, OutputCopier, asset_key
from gateway.storage import Storage
from gateway.store.jobs import AssetRecord, JobStore

__all__ = ["UnsupportedType", "Uploads", "upload_path"]

log = logging.getLogger(__name__)


class UnsupportedType(CutoverError):
    """The uploaded file's content type is not allowed (``allowed_output_types``)."""

    status = 415
    title = "Unsupported media type"


def upload_path(provider: str, token: str) -> str:
    """The path (after the callback URL) to give Cog as ``--upload-url``."""
    return f"/provider-uploads/{provider}/{token}/"


class Uploads:
    """Receives provider uploads into owned storage.

    Parameters
    ----------
    copier : OutputCopier
        Decides the content type, the size limit and the owned URL, as for any output.
    storage : Storage
        Where the bytes go.
    store : JobStore
        Whose predictions they are, and where their asset rows are written.
    tokens : mapping
        Provider name -> its ``upload_token``; providers not in it take no uploads.
    """

    def __init__(
        self,
        *,
        copier: OutputCopier,
        storage: Storage,
        store: JobStore,
        tokens: Mapping[str, str],
    ) -> None:
        self._copier = copier
        self._storage = storage
        self._store = store
        self._tokens = dict(tokens)

    async def authorize(self, provider: str, token: str, job_id: str) -> None:
        """Check the upload's URL and prediction before its body is read.

        Raises
        ------
        NotFound
            Unknown provider or token, or a prediction that is not this provider's.
        """
        expected = self._tokens.get(provider)
        if expected is None or not same_secret(token, expected):
            raise NotFound("unknown upload URL")
        owner = await self._store.callback_token(job_id) if job_id else None
        if owner is None or owner[0] != provider:
            raise NotFound("the upload names no prediction of this provider")

    async def receive(
        self,
        job_id: str,
        name: str,
        content_type: str,
        length: int | None,
        chunks: AsyncIterable[bytes],
    ) -> str:
        """Store one uploaded file of ``job_id`` (after :meth:`authorize`); its owned URL.

        Raises
        ------
        UnsupportedType, PayloadTooLarge
            The file is refused (before its body is read when the headers tell).
        """
        limit = self._copier.max_output_bytes
        try:
            content_type = self._copier.accept(content_type)
            if length is not None and length > limit:
                raise DownloadFailed(f"an output file exceeds the limit of {limit} bytes")
            key, record = await self._spool(job_id, name, content_type, limit, chunks)
        except AssetError as exc:
            log.warning("output_upload_refused", extra={"job_id": job_id, "error": exc.detail})
            raise UnsupportedType(exc.detail) from exc
        except DownloadFailed as exc:
            log.warning("output_upload_refused", extra={"job_id": job_id, "error": str(exc)})
            raise PayloadTooLarge(str(exc)) from exc
        await self._store.record_asset(job_id, record)
        log.info(
            "output_uploaded",
            extra={"job_id": job_id, "key": key, "size_bytes": record.size_bytes},
        )
        return self._copier.asset_url(key)

    async def _spool(
        self, job_id: str, name: str, content_type: str, limit: int,
        chunks: AsyncIterable[bytes],
    ) -> tuple[str, AssetRecord]:
        path = self._storage.temp_path()
        spool = Spool(path, limit, write_back=self._storage.fsync)
        try:
            try:
                async for chunk in chunks:
                    await spool.write(chunk)
                sha256 = await spool.finish()
            except BaseException:
                await spool.discard()
                raise
            key = asset_key(job_id, sha256, name, content_type)
            await self._storage.put_file(key, path)
        finally:
            await remove(path)
        return key, AssetRecord(
            key=key, sha256=sha256, size_bytes=spool.size, content_type=content_type,
            source="upload",
        )
