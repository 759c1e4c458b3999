"""The admin API's replays of recorded inputs (docs/cutover-day.md, "Replaying recorded
inputs"), under ``/admin`` with admin tokens; a ``viewer`` token may read them only.

``POST /admin/routes/{route}/replays``
    ``{"since": "7d" | ISO 8601, "limit": N, "baseline_percent": P}`` (each optional):
    start a replay; 201 with the replay. 404: unknown route; 409: no candidate, no
    ``shadow_policy``, or a replay of the route already running; 422: a bad field.
``GET  /admin/routes/{route}/replays``
    the route's newest replays with their progress: ``{"results": [replay, ...]}``
``GET  /admin/routes/{route}/replays/{id}``
    one replay: state, counts (``inputs``: total, sent, skipped, left; ``jobs``: created,
    done, dropped), ``progress`` from 0 to 1
``POST /admin/routes/{route}/replays/{id}/stop``, ``.../resume``
    stop a running replay (409 otherwise); resume a stopped one where it stopped
``GET  /admin/routes/{route}/replays/{id}/report?format=html|md|json``
    the replay's shadow report (docs/shadow.md), marked as that replay

Every refusal is problem+json and changes nothing.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from contracts.errors import ContractViolation, NotFound
from gateway.http import keys
from gateway.http.admintokens import IDENTITY
from gateway.http.middleware import json_object, json_response
from gateway.rollout.replay import ReplayControl

__all__ = ["REPORT_TYPES", "routes"]

routes = web.RouteTableDef()
_REPLAYS = "/routes/{owner}/{name}/replays"
_START_FIELDS = ("since", "limit", "baseline_percent")
REPORT_TYPES = {"html": "text/html", "md": "text/markdown", "json": "application/json"}


def _replays(request: web.Request) -> ReplayControl:
    return request.config_dict[keys.ROUTES].replay


def _key(request: web.Request) -> str:
    return f"{request.match_info['owner']}/{request.match_info['name']}"


async def _start_body(request: web.Request) -> dict[str, Any]:
    body = await json_object(request)
    if unknown := sorted(set(body) - set(_START_FIELDS)):
        raise ContractViolation(f"unknown field(s) {', '.join(unknown)}: a replay takes "
                                + ", ".join(f'"{name}"' for name in _START_FIELDS))
    if body.get("since") is not None and not isinstance(body["since"], str):
        raise ContractViolation('"since" must be text: 7d, 12h, 90m or an ISO 8601 time')
    return body


@routes.post(_REPLAYS)
async def start(request: web.Request) -> web.Response:
    """Start a replay of the route's recorded inputs."""
    body = await _start_body(request)
    replay = await _replays(request).start(
        _key(request), since=body.get("since"), limit=body.get("limit"),
        baseline_percent=body.get("baseline_percent"), who=request[IDENTITY].name)
    return json_response(replay.to_json(), status=201)


@routes.get(_REPLAYS)
async def listing(request: web.Request) -> web.Response:
    """The route's replays, newest first."""
    found = await _replays(request).listing(_key(request))
    return json_response({"results": [replay.to_json() for replay in found]})


@routes.get(_REPLAYS + "/{id}")
async def progress(request: web.Request) -> web.Response:
    """One replay and its progress."""
    replay = await _replays(request).get(_key(request), request.match_info["id"])
    return json_response(replay.to_json())


@routes.post(_REPLAYS + "/{id}/{verb}")
async def stop_or_resume(request: web.Request) -> web.Response:
    """Stop a running replay, or resume a stopped one where it stopped."""
    replays, verb = _replays(request), request.match_info["verb"]
    if verb not in ("stop", "resume"):
        raise NotFound(f"a replay has no action {verb!r}: stop or resume")
    act = replays.stop if verb == "stop" else replays.resume
    replay = await act(_key(request), request.match_info["id"])
    return json_response(replay.to_json())


@routes.get(_REPLAYS + "/{id}/report")
async def report(request: web.Request) -> web.Response:
    """The replay's shadow report."""
    fmt = request.query.get("format", "html")
    if fmt not in REPORT_TYPES:
        raise ContractViolation(f"format must be one of {', '.join(REPORT_TYPES)}")
    key = _key(request)
    replay = await _replays(request).get(key, request.match_info["id"])
    services = request.config_dict[keys.ROUTES]
    spec = await services.control.spec(key)
    text = await services.pairs.report(key, spec, replay=replay, fmt=fmt)  # type: ignore[arg-type]
    return web.Response(text=text, content_type=REPORT_TYPES[fmt], charset="utf-8")
