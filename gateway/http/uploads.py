"""The provider upload endpoint: the HTTP side of :mod:`gateway.uploads` (Cog's
``--upload-url``; docs/cog.md §1.10)."""

from __future__ import annotations

from aiohttp import web

from gateway.http import keys
from gateway.http.middleware import json_response

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.put("/provider-uploads/{provider}/{token}/{name}")
async def provider_upload(request: web.Request) -> web.Response:
    """One output file, streamed into owned storage; 201 with its owned URL as
    ``Location`` (which Cog puts in the prediction's output)."""
    uploads = request.app[keys.UPLOADS]
    job_id = request.headers.get("X-Prediction-Id", "")
    # The URL and the prediction are checked before the body is read.
    await uploads.authorize(request.match_info["provider"], request.match_info["token"], job_id)
    url = await uploads.receive(
        job_id,
        request.match_info["name"],
        request.headers.get("Content-Type", ""),
        request.content_length,
        request.content.iter_any(),
    )
    return json_response({"url": url}, status=201, headers={"Location": url})
