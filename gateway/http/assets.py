"""Owned output files, served from the gateway's storage (docs/replicate-api.md §8.4)."""

from __future__ import annotations

from aiohttp import web

from gateway.http import keys

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/assets/{key:.+}")
async def asset(request: web.Request) -> web.StreamResponse:
    """An output file in owned storage; no token needed (capability URL, §8.4).

    Only files the gateway recorded as a prediction's output are served: a file that
    merely sits under the storage root (put there by anyone else) is 404, like a miss.
    """
    key = request.match_info["key"]
    path = request.app[keys.STORAGE].path(key)
    if path is None:
        raise web.HTTPNotFound()
    content_type = await request.app[keys.STORE].asset_content_type(key)
    if content_type is None:  # not recorded as an output: whatever it is, it is not served
        raise web.HTTPNotFound()
    response = web.FileResponse(path, headers=_ASSET_HEADERS)
    response.content_type = content_type
    return response


# Model outputs are untrusted content on the gateway's origin: never run them as a page
# (an HTML or SVG output stays inert), and never let a browser guess another type.
_ASSET_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=3600",
}
