"""Operations endpoints outside the Replicate API: health, readiness, metrics."""

from __future__ import annotations

from aiohttp import web

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
