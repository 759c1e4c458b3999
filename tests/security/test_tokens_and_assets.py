"""Tokens and owned files: API and admin tokens never interchangeable, secrets compared in
constant time, and ``/assets`` serving exactly the files it recorded (no path traversal,
no key enumeration)."""

from __future__ import annotations

import ast
import base64
import re
from pathlib import Path
from typing import Any

import pytest

from contracts.job import JobState
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

ADMIN = "adm_test_token_0123456789"  # a test value, not a credential
SOURCES = Path(__file__).resolve().parents[2]
_SECRET_NAME = re.compile(r"token|secret|signature|digest|hmac|password", re.I)


@pytest.fixture
async def gw(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(admin={"tokens": [ADMIN]})


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_api_and_admin_tokens_are_never_interchangeable(gw: GatewayHarness) -> None:
    client = gw.client
    assert (await client.get("/v1/predictions", headers=_bearer(TOKEN))).status == 200
    assert (await client.get("/admin/webhooks/dead", headers=_bearer(ADMIN))).status == 200
    refused = {
        "admin token on the API": await client.get("/v1/predictions", headers=_bearer(ADMIN)),
        "admin token creating": await client.post(
            "/v1/predictions", json={"version": VERSION, "input": {}}, headers=_bearer(ADMIN)
        ),
        "API token on admin": await client.get("/admin/webhooks/dead", headers=_bearer(TOKEN)),
        "API token replaying": await client.post(
            "/admin/webhooks/dead/replay", json={"since": "2020-01-01T00:00:00Z"},
            headers=_bearer(TOKEN),
        ),
        "token prefix": await client.get("/v1/predictions", headers=_bearer(TOKEN[:-1])),
        "token plus a byte": await client.get("/v1/predictions", headers=_bearer(TOKEN + "x")),
        "no scheme": await client.get("/v1/predictions", headers={"Authorization": TOKEN}),
    }
    statuses = {name: r.status for name, r in refused.items()}
    assert statuses == dict.fromkeys(refused, 401)
    for response in refused.values():
        assert response.content_type == "application/problem+json"


def _secret_like(node: ast.expr) -> bool:
    """A variable or attribute named like a secret (not a CONSTANT, not a table column)."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
        if ".c." in ast.unparse(node):  # a SQL column: the database compares it
            return False
    else:
        return False
    return not name.isupper() and bool(_SECRET_NAME.search(name))


def _secret_comparisons(path: Path) -> list[str]:
    """``==``/``!=``/``in`` comparisons of a secret-named value with anything but None."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) and o.value is None for o in operands):
            continue
        if any(_secret_like(o) for o in operands):
            found.append(f"{path.relative_to(SOURCES)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_secrets_are_compared_in_constant_time() -> None:
    files = [p for package in ("gateway", "adapters") for p in (SOURCES / package).rglob("*.py")]
    suspicious = [hit for path in files for hit in _secret_comparisons(path)]
    assert suspicious == [], "compare secrets with hmac.compare_digest:\n" + "\n".join(suspicious)
    uses = sum("same_secret(" in p.read_text() for p in files)
    assert uses >= 3  # API tokens, admin tokens, provider callback tokens (and signatures)
    # hmac.compare_digest raises TypeError on a non-ASCII str (a 500): only
    # contracts.auth.same_secret calls it, on bytes.
    direct = [str(p.relative_to(SOURCES)) for p in files if "compare_digest(" in p.read_text()]
    assert direct == [], "compare secrets with contracts.auth.same_secret"


async def _owned_file(gw: GatewayHarness, data: bytes) -> str:
    prediction = await gw.create({"version": VERSION, "input": {"prompt": "f"}})
    await gw.settle()
    uri = "data:application/octet-stream;base64," + base64.b64encode(data).decode()
    gw.fake.set_state(prediction["id"], JobState.COMPLETED, output=uri)
    assert await gw.deliver(prediction["id"], JobState.COMPLETED, output=uri) == 200
    done = await gw.wait_for(prediction["id"], "succeeded")
    return str(done["output"])


async def test_assets_allow_no_path_traversal_or_key_enumeration(
    gw: GatewayHarness, tmp_path: Path
) -> None:
    url = await _owned_file(gw, b"owned bytes")
    key = url.split("/assets/", 1)[1]
    job_id, random_part, name = key.split("/")
    assert re.fullmatch(r"[0-9a-f]{16,}", random_part)  # unguessable, not a counter
    assert (await (await gw.client.get(f"/assets/{key}")).read()) == b"owned bytes"
    (tmp_path / "secret.txt").write_text("not for apps")  # beside the storage directory
    stray = tmp_path / "assets" / job_id / "stray.bin"  # inside it, but never recorded
    stray.write_bytes(b"unrecorded")
    probes = [
        "/assets/../secret.txt", "/assets/%2e%2e/secret.txt", "/assets/..%2fsecret.txt",
        "/assets/%2e%2e%2fsecret.txt", f"/assets/{job_id}/../../secret.txt",
        f"/assets/{key}/../../../secret.txt", "/assets//etc/passwd", "/assets/%2fetc%2fpasswd",
        "/assets/..\\secret.txt", "/assets/....//secret.txt", f"/assets/{job_id}/stray.bin",
        f"/assets/{job_id}/", f"/assets/{job_id}", "/assets/", f"/assets/{job_id}/%2a",
        f"/assets/{job_id}/{'0' * len(random_part)}/{name}",
        f"/assets/{job_id}/{random_part[:-1]}/{name}", f"/assets/{key.upper()}",
        f"/assets/{key}%00.txt", f"/assets/{key}/",
    ]
    leaked = {}
    for probe in probes:
        response = await gw.client.get(probe)
        body = await response.read()
        # 401: the path normalised to one outside /assets/ (auth, not a file, answers)
        refused = response.status in (404, 401)
        if not refused or b"not for apps" in body or b"unrecorded" in body:
            leaked[probe] = response.status
    assert leaked == {}
