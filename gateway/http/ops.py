"""Routes outside the Replicate API: health, readiness, owned files, provider webhooks."""

from __future__ import annotations

from aiohttp import web

from contracts.errors import PayloadTooLarge, WebhookVerificationError
from gateway.http import keys
from gateway.http.middleware import json_response, problem_response
from gateway.metrics import CONTENT_TYPE

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    """Alive: the process answers."""
    return json_response({"status": "ok"})


@routes.get("/ready")
async def ready(request: web.Request) -> web.Response:
    """Ready: the store answers and at least one provider and route are configured."""
    problems = []
    try:
        await request.app[keys.STORE].ping()
    except Exception as exc:  # noqa: BLE001 (readiness reports any store failure)
        problems.append(f"store unreachable: {type(exc).__name__}")
    if not request.app[keys.PROVIDERS]:
        problems.append("no providers configured")
    if not request.app[keys.ROUTER].routes:
        problems.append("no routes configured")
    if problems:
        return problem_response(503, "Not ready", "; ".join(problems))
    return json_response({"status": "ready"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics of this process (:mod:`gateway.metrics`)."""
    body = request.app[keys.METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


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


@routes.post("/provider-webhooks/{provider}/{job_id}/{token}")
async def provider_webhook(request: web.Request) -> web.Response:
    """A provider's event: verified before parsing, stored once, acknowledged fast."""
    provider = request.match_info["provider"]
    job_id = request.match_info["job_id"]
    intake = request.app[keys.INTAKE]
    counter = request.app[keys.METRICS].provider_webhooks
    try:
        # The URL is checked before the body is read: strangers cannot make us buffer.
        upstream = await intake.authorize(provider, job_id, request.match_info["token"])
        body = await _read_limited(request, request.app[keys.SETTINGS].gateway.intake_limit)
        new = await intake.accept(upstream, job_id, request.headers, body)
    except WebhookVerificationError:
        known = provider if provider in request.app[keys.PROVIDERS] else "unknown"
        counter.labels(known, "refused").inc()
        raise
    counter.labels(provider, "stored" if new else "duplicate").inc()
    return json_response({"received": True, "duplicate": not new})


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes.

    Provider webhooks carry whole outputs (Cog's files as base64 ``data:`` URIs), so their
    limit follows ``max_output_bytes`` rather than the API's ``max_body_bytes``.
    """
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the webhook body is larger than the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the webhook body is larger than the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
