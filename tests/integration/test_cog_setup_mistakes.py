"""Set-up mistakes with a real Cog server, and what the operator is told.

* A provider's ``webhook_auth_token`` that Cog was not started with: every Cog webhook is
  refused (401) and the prediction never finishes. The gateway used to say so only in its
  access log (``status: 401`` at info level); now it logs ``provider_webhook_refused`` (a
  warning) naming the provider, the job and what to set.
* Cog's ``--upload-url`` with another token than the provider's ``upload_token``: the
  prediction fails with "upload returned status 404"; the gateway now logs
  ``provider_upload_refused`` with what to set.
* ``openapi_schema = "provider"`` on a Cog server run from ``predict.py`` (it has no
  schema): every create was a 500 saying Cog's ``/openapi.json`` "answered 503 (not
  started, try later)"; now it says there is no schema and what to configure instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.cog_server import CogServer
from tests.support.process import GatewayProcess, listen_port
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog, pytest.mark.timeout(120)]

MODEL_DIR = Path(__file__).resolve().parents[2] / "examples" / "echo"
API_TOKEN = "r8_auth_mismatch_test"  # a test value, not a credential


def refused(gateway: GatewayProcess, event: str = "provider_webhook_refused") -> list[dict]:
    lines = [json.loads(x) for x in gateway.log_text().splitlines() if x.startswith("{")]
    return [x for x in lines if x.get("event") == event]


def gateway_config(port: int, tmp_path: Path, provider: dict, **route: object) -> dict:
    return {
        "gateway": {
            "listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
            "api_tokens": [API_TOKEN],
            "database_url": f"sqlite+aiosqlite:///{tmp_path}/cutover.db",
            "storage_url": f"file://{tmp_path / 'assets'}",
        },
        "providers": {"cog": {"kind": "cog", **provider}},
        "routes": [{"model": "acme/echo", "provider": "cog", **route}],
    }


def create(gateway: GatewayProcess, **model_input: object) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/predictions", timeout=10,
                      headers={"Authorization": f"Bearer {API_TOKEN}"},
                      json={"version": "acme/echo", "input": {"prompt": "x", **model_input}})


def test_cog_webhooks_without_the_configured_token_are_logged_as_a_setup_mistake(
    tmp_path: Path,
) -> None:
    port = listen_port()
    with CogServer(MODEL_DIR) as cog:  # no WEBHOOK_AUTH_TOKEN
        provider = {"base_url": cog.url, "webhook_auth_token": "configured-but-not-given-to-cog"}
        gateway = GatewayProcess(gateway_config(port, tmp_path, provider), tmp_path).start()
        try:
            created = create(gateway)
            assert created.status_code == 201, created.text
            found = wait_until_sync(lambda: refused(gateway), 60, what="a refused webhook")
        finally:
            gateway.stop()
    assert found[0]["level"] == "warning"
    assert found[0]["provider"] == "cog" and found[0]["job_id"] == created.json()["id"]
    assert found[0]["reason"] == (
        "cog: webhook without Authorization (start Cog with WEBHOOK_AUTH_TOKEN set to this "
        "provider's webhook_auth_token)"
    )


def test_a_provider_schema_from_a_cog_server_without_one_says_what_to_configure(
    tmp_path: Path,
) -> None:
    port = listen_port()
    with CogServer(MODEL_DIR) as cog:
        config = gateway_config(port, tmp_path, {"base_url": cog.url}, openapi_schema="provider")
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            created = create(gateway)
        finally:
            gateway.stop()
    assert created.status_code == 500
    detail = created.json()["detail"]
    assert detail.startswith("the model schema of provider 'cog' is unavailable: cog: this "
                             "Cog server has no OpenAPI schema"), detail
    assert "openapi_schema inline or as a JSON file" in detail and "try later" not in detail


def test_an_upload_url_with_another_token_is_logged_with_what_to_set(tmp_path: Path) -> None:
    port = listen_port()
    wrong = f"http://127.0.0.1:{port}/provider-uploads/cog/not-the-configured-token-0123/"
    with CogServer(MODEL_DIR, args=["--upload-url", wrong]) as cog:
        provider = {"base_url": cog.url, "upload_token": "the-configured-upload-token-42"}
        gateway = GatewayProcess(gateway_config(port, tmp_path, provider), tmp_path).start()
        try:
            created = create(gateway, output_kind="file")
            assert created.status_code == 201, created.text
            found = wait_until_sync(lambda: refused(gateway, "provider_upload_refused"), 60,
                                    what="a refused upload")
        finally:
            gateway.stop()
    assert found[0]["level"] == "warning" and found[0]["provider"] == "cog"
    assert found[0]["job_id"] == created.json()["id"]
    assert found[0]["reason"] == "unknown upload URL"
    assert "--upload-url {callback_url}/provider-uploads/{provider}/" in found[0]["hint"]
    assert "not-the-configured" not in json.dumps(found) and "configured-upload" not in (
        json.dumps(found)
    )
