"""``GET /openapi.json`` describes every registered route (gateway/http/openapi.py)."""

from __future__ import annotations

import re

from openapi_spec_validator import validate

from gateway.http.openapi import registered
from tests.support.gateway import GatewayHarness


async def test_every_registered_route_is_described(gateway: GatewayHarness) -> None:
    answer = await gateway.client.get("/openapi.json")  # no token needed
    assert answer.status == 200
    document = await answer.json()
    validate(document)  # a valid OpenAPI 3.1 document
    routes = registered(gateway.app)
    assert len(routes) > 30
    for method, path, _ in routes:
        clean = re.sub(r"\{([^}:]+)(?::[^}]*)?\}", r"{\1}", path)
        assert method.lower() in document["paths"].get(clean, {}), f"{method} {path} missing"
    create = document["paths"]["/v1/predictions"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PredictionRequest"
    }
    assert "Prediction" in document["components"]["schemas"]
    assert "/admin/webhooks/dead" in document["paths"]
    assert "/v1/files" in document["paths"] and "/openapi.json" in document["paths"]
    # the console's pages are for people (HTML, a cookie): not in the API's document
    assert not [path for path in document["paths"] if path.startswith("/admin/console")]
