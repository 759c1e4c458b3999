"""The console's sessions, CSRF and Origin checks, roles and pages over HTTP (no browser:
tests/acceptance/test_console_browser.py drives Chromium); docs/console.md."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from tests.support.clock import MovableClock
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_console_test"  # test values, not credentials
VIEWER_TOKEN = "adm_console_viewer"
BASE = "/admin/console"


def _sections(public_url: str = "http://gateway.test") -> dict[str, Any]:
    return {
        "gateway": {"public_url": public_url},
        "providers": {"fake": {"kind": "fake"}, "fake2": {"kind": "fake"}},
        "routes": [{"model": "acme/echo", "version": VERSION, "provider": "fake",
                    "candidate": "fake2",
                    "guard": {"max_error_rate": 0.3, "min_samples": 5, "window_s": 60}}],
        "admin": {"tokens": [{"name": "ops-ann", "token": ADMIN_TOKEN},
                             {"name": "vic", "token": VIEWER_TOKEN, "role": "viewer"}]},
    }


@pytest.fixture
async def gw(make_gateway: Any) -> GatewayHarness:
    return await make_gateway(**_sections())


def _origin(client: TestClient) -> dict[str, str]:
    return {"Origin": str(client.make_url("")).rstrip("/")}


async def _sign_in(client: TestClient, token: str = ADMIN_TOKEN) -> str:
    """Sign in; the CSRF token of the pages comes back."""
    response = await client.post(f"{BASE}/sign-in", data={"token": token},
                                 headers=_origin(client))
    assert response.status == 200 and response.url.path == f"{BASE}/", await response.text()
    return _csrf(await response.text())


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


async def _spec(gw: GatewayHarness) -> dict[str, Any]:
    response = await gw.client.get(f"/admin/routes/{ROUTE}",
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    return (await response.json())["spec"]


async def test_sign_in_sets_an_opaque_strict_http_only_session_cookie(gw):
    client = gw.client
    response = await client.post(f"{BASE}/sign-in", data={"token": ADMIN_TOKEN},
                                 headers=_origin(client), allow_redirects=False)
    assert response.status == 303
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("cutover_console=") and ADMIN_TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin/console" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    page = await client.get(f"{BASE}/")
    text = await page.text()
    assert page.status == 200 and ROUTE in text and "ops-ann" in text
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp


async def test_behind_tls_the_cookie_is_secure(make_gateway):
    tls = await make_gateway(**_sections(public_url="https://gateway.test"))
    response = await tls.client.post(f"{BASE}/sign-in", data={"token": ADMIN_TOKEN},
                                     headers={"Origin": "https://gateway.test"},
                                     allow_redirects=False)
    assert response.status == 303
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("__Secure-cutover_console=") and "; Secure" in cookie


async def test_a_wrong_token_or_a_foreign_origin_signs_nobody_in(gw):
    client = gw.client
    wrong = await client.post(f"{BASE}/sign-in", data={"token": "adm_nope"},
                              headers=_origin(client), allow_redirects=False)
    assert wrong.status == 401 and "Set-Cookie" not in wrong.headers
    assert "is not one of the gateway" in await wrong.text()
    foreign = await client.post(f"{BASE}/sign-in", data={"token": ADMIN_TOKEN},
                                headers={"Origin": "https://evil.example"},
                                allow_redirects=False)
    assert foreign.status == 403 and "Set-Cookie" not in foreign.headers
    page = await client.get(f"{BASE}/", allow_redirects=False)
    assert (page.status, page.headers["Location"]) == (303, f"{BASE}/sign-in")


async def test_changes_need_the_session_the_csrf_token_and_the_origin(gw):
    client = gw.client
    csrf = await _sign_in(client)
    url = f"{BASE}/routes/{ROUTE}/canary"
    form = {"percent": "10", "reason": "first step", "csrf": csrf}
    for data, headers, status in (
        ({**form, "csrf": "forged"}, _origin(client), 403),
        ({k: v for k, v in form.items() if k != "csrf"}, _origin(client), 403),
        (form, {"Origin": "https://evil.example"}, 403),
        (form, {}, 403),  # no Origin at all
    ):
        refused = await client.post(url, data=data, headers=headers, allow_redirects=False)
        assert refused.status == status, await refused.text()
        assert "nothing was changed" in await refused.text()
    assert (await _spec(gw))["canary_percent"] == 0
    client.session.cookie_jar.clear()
    signed_out = await client.post(url, data=form, headers=_origin(client),
                                   allow_redirects=False)
    assert signed_out.status == 401
    assert (await _spec(gw))["canary_percent"] == 0


async def test_an_action_is_the_admin_apis_change_with_the_same_limits(gw):
    client = gw.client
    csrf = await _sign_in(client)
    done = await client.post(f"{BASE}/routes/{ROUTE}/canary", headers=_origin(client),
                             data={"percent": "10", "reason": "first step", "csrf": csrf})
    assert done.status == 200 and "?done=" in str(done.url)
    assert "canary_percent</code> 0 → 10" in await done.text()
    assert (await _spec(gw))["canary_percent"] == 10
    for data, status, said in (
        ({"percent": "101", "reason": "r"}, 422, "0 to 100"),
        ({"percent": "10", "reason": "x" * 1001}, 422, "1000"),
        ({"percent": "10", "reason": " "}, 422, "reason"),
        ({"percent": "1_0", "reason": "r"}, 422, "number"),
    ):
        refused = await client.post(f"{BASE}/routes/{ROUTE}/canary", headers=_origin(client),
                                    data={**data, "csrf": csrf})
        assert refused.status == status
        text = await refused.text()
        assert said in text and "Nothing was changed" in text
    unknown = await client.post(f"{BASE}/routes/acme/nope/canary", headers=_origin(client),
                                data={"percent": "5", "reason": "r", "csrf": csrf})
    assert unknown.status == 404
    assert (await _spec(gw))["canary_percent"] == 10
    history = await gw.client.get("/admin/route-changes",
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    entries = (await history.json())["results"]
    assert [(e["who"], e["action"]) for e in entries[:1]] == [("ops-ann", "set-canary")]


async def test_a_viewer_sees_everything_and_changes_nothing(gw):
    client = gw.client
    csrf = await _sign_in(client, VIEWER_TOKEN)
    page = await client.get(f"{BASE}/routes/{ROUTE}")
    assert page.status == 200 and "is a viewer" in await page.text()
    refused = await client.post(f"{BASE}/routes/{ROUTE}/promote", headers=_origin(client),
                                data={"reason": "r", "csrf": csrf})
    assert refused.status == 403 and "viewer" in await refused.text()
    assert (await _spec(gw))["candidate"] == "fake2"


async def test_the_cookie_never_authorizes_the_admin_api(gw):
    client = gw.client
    await _sign_in(client)
    response = await client.post(f"/admin/routes/{ROUTE}/canary",
                                 json={"percent": 50, "reason": "cookie only"},
                                 headers=_origin(client))
    assert response.status == 401
    assert (await _spec(gw))["canary_percent"] == 0


async def test_sign_out_revokes_the_session_and_idle_ends_it(gw):
    client = gw.client
    csrf = await _sign_in(client)
    cookies = client.session.cookie_jar.filter_cookies(client.make_url(f"{BASE}/"))
    session_id = cookies["cutover_console"].value
    out = await client.post(f"{BASE}/sign-out", data={"csrf": csrf}, headers=_origin(client),
                            allow_redirects=False)
    assert out.status == 303
    client.session.cookie_jar.update_cookies({"cutover_console": session_id})  # replayed
    again = await client.get(f"{BASE}/", allow_redirects=False)
    assert again.status == 303  # to the sign-in page: the store forgot it
    await _sign_in(client)
    gw.clock.advance(29 * 60)  # a refresh does not keep a session alive ...
    assert (await client.get(f"{BASE}/live")).status == 200
    gw.clock.advance(2 * 60)  # ... and 31 min after the last page, it is over
    assert (await client.get(f"{BASE}/live")).status == 401


async def test_a_second_process_on_the_same_store_accepts_the_session(gw, make_settings,
                                                                      aiohttp_client):
    await _sign_in(gw.client)
    cookies = gw.client.session.cookie_jar.filter_cookies(gw.client.make_url(f"{BASE}/"))
    other = await aiohttp_client(create_app(make_settings(**_sections()), run_loops=False,
                                            clock=MovableClock()))
    other.session.cookie_jar.update_cookies({"cutover_console":
                                             cookies["cutover_console"].value})
    page = await other.get(f"{BASE}/routes/{ROUTE}")
    assert page.status == 200 and "ops-ann" in await page.text()


async def test_the_shadow_report_keeps_its_policy_and_is_framed_only_here(gw):
    client = gw.client
    await _sign_in(client)
    report = await client.get(f"{BASE}/routes/{ROUTE}/shadow-report")
    assert report.status == 200 and "<html" in await report.text()
    csp = report.headers["Content-Security-Policy"]
    assert "frame-ancestors 'self'" in csp and "script" not in csp
