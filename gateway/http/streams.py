"""``urls.stream``: a prediction's server-sent events (docs/replicate-api.md §7).

``GET /streams/{id}?t=<token>`` needs no API token (the JS client sends none, §7.3): the
``t`` capability, an HMAC of the id under its tenant's signing secret (docs/security.md),
is the authorisation; a wrong one is a 404, as an unknown id. A
``Last-Event-ID`` header resumes after that event; one the gateway did not issue replays
from the start, logged as ``stream_resumed_from_start``. The answer is always
``text/event-stream`` with a 200; events, ids and keepalives come from
:mod:`gateway.stream` (docs/streaming.md).
"""

from __future__ import annotations

import logging

from aiohttp import web

from contracts.errors import NotFound
from gateway import ids, stream
from gateway.http import access, keys

__all__ = ["routes"]

routes = web.RouteTableDef()
log = logging.getLogger(__name__)
_LOGGED_ID_CHARS = 64


@routes.get("/streams/{id}")
async def prediction_stream(request: web.Request) -> web.StreamResponse:
    """The events of one prediction, replayed from the store and then followed live."""
    job_id = request.match_info["id"]
    token = request.query.get("t", "")
    missing = NotFound(f"stream of prediction {job_id!r} does not exist")
    if not ids.PREDICTION_ID_RE.match(job_id):
        raise missing
    store = request.app[keys.STORE]
    settings = request.app[keys.EDGE]
    try:
        job = await store.get(job_id)
    except NotFound:
        raise missing from None
    secret = request.app[keys.TENANT_SECRETS].get(job.tenant)
    if secret is None or not stream.verify_token(secret, job_id, token):
        raise missing
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    last_event_id = request.headers.get("Last-Event-ID")
    if stream.Cursor.is_foreign(last_event_id):
        log.info("stream_resumed_from_start", extra={
            "job_id": job_id, "last_event_id": str(last_event_id)[:_LOGGED_ID_CHARS],
        })
    access.add_request_id(request, response)  # prepared here: before the middleware sees it
    await response.prepare(request)
    frames = stream.follow(
        job,
        stream.Cursor.parse(last_event_id),
        wait=request.app[keys.NOTIFIER].wait_job,
        read=store.get,
        poll_s=settings.stream_poll_s,
        keepalive_s=settings.stream_keepalive_s,
        clock=request.app[keys.CLOCK],
    )
    async for frame in frames:
        await response.write(frame)
    await response.write_eof()
    return response
