"""The provider webhook endpoint: the HTTP side of :mod:`gateway.intake`."""

from __future__ import annotations

import logging

from aiohttp import web

from contracts.errors import PayloadTooLarge, WebhookVerificationError
from gateway.http import keys
from gateway.http.middleware import json_response

__all__ = ["routes"]

routes = web.RouteTableDef()
log = logging.getLogger(__name__)


@routes.post("/provider-webhooks/{provider}/{job_id}/{token}")
async def provider_webhook(request: web.Request) -> web.Response:
    """A provider's event: verified before parsing, stored once, acknowledged fast."""
    provider = request.match_info["provider"]
    job_id = request.match_info["job_id"]
    intake = request.app[keys.INTAKE]
    counter = request.app[keys.METRICS].provider_webhooks
    upstream = None
    try:
        # The URL is checked before the body is read: strangers cannot make us buffer.
        upstream = await intake.authorize(provider, job_id, request.match_info["token"])
        body = await _read_limited(request, request.app[keys.EDGE].intake_limit)
        new = await intake.accept(upstream, job_id, request.headers, body)
    except WebhookVerificationError as exc:
        known = provider if provider in request.app[keys.PROVIDERS] else "unknown"
        counter.labels(known, "refused").inc()
        if upstream is not None:  # the right job URL, refused credentials: a set-up mistake
            log.warning("provider_webhook_refused",
                        extra={"provider": provider, "job_id": job_id, "reason": exc.detail})
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
