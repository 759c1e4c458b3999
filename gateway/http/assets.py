"""Owned files, served from the gateway's storage (docs/replicate-api.md §8.4;
docs/storage.md): output assets here, and the byte-serving shared with the Files API."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.http import access, keys
from gateway.storage import LocalStorage

__all__ = ["routes", "serve_stored"]

routes = web.RouteTableDef()


@routes.get("/assets/{key:.+}")
async def asset(request: web.Request) -> web.StreamResponse:
    """An output file in owned storage; no token needed (capability URL, §8.4).

    Only files the gateway recorded as a prediction's output are served: a file that
    merely sits under the storage root (put there by anyone else) is 404, like a miss.
    """
    key = request.match_info["key"]
    if not key.isprintable():  # NUL and control characters name no stored key
        raise web.HTTPNotFound()
    content_type = await request.app[keys.STORE].asset_content_type(key)
    if content_type is None:  # not recorded as an output: whatever it is, it is not served
        raise web.HTTPNotFound()
    return await serve_stored(request, key, content_type=content_type)


async def serve_stored(
    request: web.Request, key: str, filename: str | None = None, content_type: str | None = None
) -> web.StreamResponse:
    """The bytes of ``key``: a redirect to a presigned URL (``[storage] delivery =
    "presigned"`` on a backend that has them), a local file, or a stream from storage.
    ``content_type`` (the recorded one) wins over what the storage knows.

    Raises
    ------
    web.HTTPNotFound
        ``key`` is not stored.
    """
    storage = request.app[keys.STORAGE]
    edge = request.app[keys.EDGE]
    found = await storage.stat(key)
    if found is None:
        raise web.HTTPNotFound()
    if edge.asset_delivery == "presigned":
        url = await storage.presign(key, edge.presigned_url_ttl_s)
        if url is not None:
            raise web.HTTPFound(url, headers={"Cache-Control": "no-store"})
    headers = dict(_ASSET_HEADERS)
    if filename:
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    path = None
    if isinstance(storage, LocalStorage):
        path = await asyncio.to_thread(storage.path, key)  # file system I/O
    if path is not None:
        response: web.StreamResponse = web.FileResponse(path, headers=headers)
        response.content_type = content_type or found.content_type
        return response
    response = web.StreamResponse(headers=headers)
    response.content_type = content_type or found.content_type
    response.content_length = found.size_bytes
    access.add_request_id(request, response)  # prepared here: before the middleware sees it
    await response.prepare(request)
    async for chunk in storage.read(key):
        await response.write(chunk)
    await response.write_eof()
    return response


# Model outputs are untrusted content on the gateway's origin: never run them as a page
# (an HTML or SVG output stays inert), and never let a browser guess another type.
_ASSET_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=3600",
}
