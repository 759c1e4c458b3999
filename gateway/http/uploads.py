"""The provider upload endpoint: the HTTP side of :mod:`gateway.files.uploads` (Cog's
``--upload-url``; docs/cog.md §1.10)."""

from __future__ import annotations

import logging

from aiohttp import web

from contracts.errors import NotFound
from gateway.http import keys
from gateway.http.middleware import json_response

__all__ = ["routes"]

routes = web.RouteTableDef()
log = logging.getLogger(__name__)
_HINT = ("start Cog with --upload-url {callback_url}/provider-uploads/{provider}/"
         "{upload_token}/, the provider's own upload_token; the model's prediction fails")


@routes.put("/provider-uploads/{provider}/{token}/{name}")
async def provider_upload(request: web.Request) -> web.Response:
    """One output file, streamed into owned storage; 201 with its owned URL as
    ``Location`` (which Cog puts in the prediction's output)."""
    uploads = request.app[keys.UPLOADS]
    job_id = request.headers.get("X-Prediction-Id", "")
    provider = request.match_info["provider"]
    # The URL and the prediction are checked before the body is read.
    try:
        await uploads.authorize(provider, request.match_info["token"], job_id)
    except NotFound as exc:
        if provider in request.app[keys.PROVIDERS]:  # a configured provider: a set-up mistake
            log.warning("provider_upload_refused", extra={
                "provider": provider, "job_id": job_id, "reason": exc.detail, "hint": _HINT,
            })
        raise
    url = await uploads.receive(
        job_id,
        request.match_info["name"],
        request.headers.get("Content-Type", ""),
        request.content_length,
        request.content.iter_any(),
    )
    return json_response({"url": url}, status=201, headers={"Location": url})
