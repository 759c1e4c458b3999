"""File inputs in the form each provider accepts (docs/providers.md, "File inputs").

Apps send files as ``data:`` URIs or URLs. Most providers take both as they are; a
provider whose request body is small (RunPod's ``/run`` takes 10 MB) declares
``Capabilities.max_inline_input_bytes``, and every ``data:`` URI longer than that is
stored in owned storage first and handed over as the gateway's own URL
(``{public_url}/assets/<job id>/inputs/<sha256 prefix>/input<ext>``), which the provider
can download without a token. Replicate's own upload endpoint is the adapter's business.
"""

from __future__ import annotations

import hashlib
import mimetypes
from typing import Any

from gateway.files.outputs import is_data_uri, parse_data_uri
from gateway.storage import Storage
from gateway.store.jobs import AssetRecord, JobStore

__all__ = ["InputStager"]


class InputStager:
    """Replaces large ``data:`` URIs of an input by owned URLs.

    Parameters
    ----------
    storage : Storage
        Owned storage (the same as for outputs).
    public_url : str
        The gateway's base URL, as providers reach it.
    store : JobStore
        Where the staged file is recorded (``/assets`` serves recorded files only).
    """

    def __init__(self, storage: Storage, public_url: str, store: JobStore) -> None:
        self._storage = storage
        self._public_url = public_url.rstrip("/")
        self._store = store

    async def stage(self, job_id: str, value: Any, max_inline_bytes: int | None) -> Any:
        """``value`` with every ``data:`` URI over ``max_inline_bytes`` stored and replaced
        by its URL (``None``: ``value`` unchanged).

        Raises
        ------
        AssetError
            A large ``data:`` URI does not decode.
        """
        if max_inline_bytes is None:
            return value
        if isinstance(value, dict):
            return {k: await self.stage(job_id, v, max_inline_bytes) for k, v in value.items()}
        if isinstance(value, list):
            return [await self.stage(job_id, v, max_inline_bytes) for v in value]
        if isinstance(value, str) and len(value) > max_inline_bytes and is_data_uri(value):
            return await self._keep(job_id, value)
        return value

    async def _keep(self, job_id: str, uri: str) -> str:
        content_type, data = parse_data_uri(uri)
        sha256 = hashlib.sha256(data).hexdigest()
        extension = mimetypes.guess_extension(content_type) or ".bin"
        key = f"{job_id}/inputs/{sha256[:16]}/input{extension}"
        await self._storage.put(key, data)
        record = AssetRecord(key=key, sha256=sha256, size_bytes=len(data),
                             content_type=content_type, source="input")
        await self._store.record_asset(job_id, record)
        return f"{self._public_url}/assets/{key}"
