"""``GET /openapi.json``: an OpenAPI 3.1 description of every endpoint this gateway serves.

Generated, not written: the paths and methods come from the application's own route
table (sub-applications included, so the admin API is there too), each operation's
summary from its handler's docstring, and the request and response bodies from the
pydantic models in :mod:`contracts.replicate` (their JSON schemas become
``components.schemas``). A test checks that every registered route is listed
(docs/openapi.md).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from contracts.replicate import (
    Account,
    Deployment,
    Model,
    ModelPredictionRequest,
    Prediction,
    PredictionPage,
    PredictionRequest,
    Problem,
    Version,
    WebhookSecret,
)
from gateway.http import keys
from gateway.http.middleware import PUBLIC_PREFIXES, json_response

__all__ = ["describe", "routes"]

routes = web.RouteTableDef()
_PARAM_RE = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")

#: (method, path without ``/v1``) -> (request body model, 2xx response model, status).
_BODIES: dict[tuple[str, str], tuple[type[BaseModel] | None, type[BaseModel] | None, int]] = {
    ("POST", "/predictions"): (PredictionRequest, Prediction, 201),
    ("POST", "/models/{owner}/{name}/predictions"): (ModelPredictionRequest, Prediction, 201),
    ("POST", "/deployments/{owner}/{name}/predictions"): (
        ModelPredictionRequest,
        Prediction,
        201,
    ),
    ("GET", "/predictions/{id}"): (None, Prediction, 200),
    ("POST", "/predictions/{id}/cancel"): (None, Prediction, 200),
    ("GET", "/predictions"): (None, PredictionPage, 200),
    ("GET", "/models/{owner}/{name}"): (None, Model, 200),
    ("GET", "/models/{owner}/{name}/versions/{version}"): (None, Version, 200),
    ("GET", "/deployments/{owner}/{name}"): (None, Deployment, 200),
    ("GET", "/account"): (None, Account, 200),
    ("GET", "/webhooks/default/secret"): (None, WebhookSecret, 200),
}
_CREATE_HEADERS = (  # docs/replicate-api.md §3.2
    ("Prefer", "wait or wait=N: hold the create for up to N seconds"),
    ("Cancel-After", "a deadline such as 30s, 5m or 1h30m (at least 5 s)"),
    ("Idempotency-Key", "the same key, body and endpoint return the same prediction"),
)
#: (method, path without ``/v1``) -> the headers and query parameters it reads.
_EXTRA_PARAMETERS: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    **{
        ("POST", path): [(name, "header", text) for name, text in _CREATE_HEADERS]
        for path in ("/predictions", "/models/{owner}/{name}/predictions",
                     "/deployments/{owner}/{name}/predictions")
    },
    ("GET", "/predictions"): [  # docs/replicate-api.md §2.5
        ("cursor", "query", "the next or previous page, as returned"),
        ("created_after", "query", "an RFC 3339 time"),
        ("created_before", "query", "an RFC 3339 time"),
    ],
    ("GET", "/streams/{id}"): [("t", "query", "the stream capability in urls.stream")],
    ("GET", "/file-downloads/{id}"): [  # signed download URLs (docs/files.md)
        ("expiry", "query", "Unix seconds after which the URL no longer serves"),
        ("signature", "query", "the URL's HMAC-SHA256 signature, hex"),
    ],
}
_MODELS = (
    Account, Deployment, Model, ModelPredictionRequest, Prediction, PredictionPage,
    PredictionRequest, Problem, Version, WebhookSecret,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _components() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


def _operation(method: str, path: str, handler: Any) -> dict[str, Any]:
    doc = inspect.getdoc(handler) or handler.__name__.replace("_", " ")
    operation: dict[str, Any] = {
        "operationId": method.lower() + re.sub(r"[^A-Za-z0-9]+", "_", path).rstrip("_"),
        "summary": doc.splitlines()[0],
        "responses": {
            "default": {
                "description": "An error (RFC 9457 problem details)",
                "content": {"application/problem+json": {"schema": _ref(Problem)}},
            }
        },
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM_RE.findall(path)
    ] + [
        {"name": name, "in": where, "required": False, "description": text,
         "schema": {"type": "string"}}
        for name, where, text in _EXTRA_PARAMETERS.get((method, path.removeprefix("/v1")), [])
    ]
    if parameters:
        operation["parameters"] = parameters
    request, response, status = _BODIES.get((method, path.removeprefix("/v1")), (None, None, 200))
    if request is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(request)}},
        }
    answer: dict[str, Any] = {"description": "Success"}
    if response is not None:
        answer["content"] = {"application/json": {"schema": _ref(response)}}
    operation["responses"][str(status)] = answer
    if not path.startswith(PUBLIC_PREFIXES) and path != "/openapi.json":
        operation["security"] = [{"bearer": []}]
    return operation


#: The operator console's pages are HTML for people, signed in by cookie (docs/console.md):
#: not operations of the API this document describes.
UNDESCRIBED_PREFIXES = ("/admin/console",)


def registered(app: web.Application, prefix: str = "") -> list[tuple[str, str, Any]]:
    """Every ``(method, path template, handler)`` of ``app`` and its sub-applications, but
    the console's pages (:data:`UNDESCRIBED_PREFIXES`)."""
    found = []
    for route in app.router.routes():
        resource = route.resource
        if resource is None or route.method in {"HEAD", "OPTIONS"}:
            continue
        if (prefix + resource.canonical).startswith(UNDESCRIBED_PREFIXES):
            continue
        sub = getattr(resource, "_app", None)
        if isinstance(sub, web.Application):
            found += registered(sub, prefix + resource.canonical)
            continue
        found.append((route.method, prefix + resource.canonical, route.handler))
    return found


def describe(app: web.Application, server_url: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, handler in registered(app):
        clean = _PARAM_RE.sub(lambda m: "{" + m.group(1) + "}", path)
        paths.setdefault(clean, {})[method.lower()] = _operation(method, clean, handler)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cutover",
            "version": "1",
            "description": "A Replicate-compatible gateway (docs/openapi.md).",
        },
        "servers": [{"url": server_url}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": _components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    """This document: every endpoint of the gateway, generated from its route table."""
    return json_response(describe(request.app, request.app[keys.EDGE].public_url))
