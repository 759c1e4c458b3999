"""The console in a real browser: Playwright driving Debian's Chromium against two gateway
processes (one database, HTTPS) in front of two real Cog servers (docs/console.md).

An operator signs in, sees the routes, moves the canary 0 -> 10 -> 50 with reasons, opens
the shadow report, rolls back, promotes and signs out; each change is live on the other
gateway process within 2 s. A change without the session, or with a wrong CSRF token,
changes nothing. Screenshots of the main pages go to ``$CUTOVER_CONSOLE_SCREENSHOTS`` or
the module's temporary directory (printed). Select with ``-m browser``.
"""

from __future__ import annotations

import os
import re
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import replicate

from tests.support.browser import chromium
from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN, ECHO_MODEL_DIR
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, live_config
from tests.support.process import GatewayProcess, listen_port
from tests.support.tls import ServerTLS

playwright_sync = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.cog, pytest.mark.browser, pytest.mark.timeout(300)]

ROUTE = f"acme/echo:{ECHO_VERSION}"
ADMIN = "adm_console_browser"  # a test value, not a credential
LIVE_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def candidate_cog(tls: ServerTLS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CogServer]:
    """The echo model whose answers end in ``!``."""
    model_dir = tmp_path_factory.mktemp("echo-bang")
    source = (ECHO_MODEL_DIR / "predict.py").read_text()
    (model_dir / "predict.py").write_text(
        source.replace("shout = prompt.upper()", 'shout = prompt.upper() + "!"'))
    env = {"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN, "SSL_CERT_FILE": str(tls.ca_file)}
    with CogServer(model_dir, env=env) as server:
        yield server


class Stack:
    def __init__(self, gateways: list[GatewayProcess], ca_file: Path) -> None:
        self.gateways = gateways
        self.http = httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file)),
                                 timeout=10.0)
        self.clients = [replicate.Client(api_token=LIVE_TOKEN, base_url=g.url) for g in gateways]

    def close(self) -> None:
        self.http.close()
        for client in self.clients:  # the client has no close() of its own
            http = client._Client__client  # type: ignore[attr-defined]
            if http is not None:
                http.close()

    def url(self, index: int = 0) -> str:
        return self.gateways[index].url

    def spec(self, index: int = 0) -> dict[str, Any]:
        response = self.http.get(f"{self.url(index)}/admin/routes/{ROUTE}",
                                 headers={"Authorization": f"Bearer {ADMIN}"})
        assert response.status_code == 200, response.text
        return dict(response.json()["spec"])

    def live_canary(self, index: int) -> float | None:
        """The canary percent the process routes with (its /metrics gauge, set when its
        router takes the store's specs)."""
        metrics = self.http.get(f"{self.url(index)}/metrics").text
        found = re.search(
            r'^cutover_route_canary_percent\{route="' + re.escape(ROUTE) + r'"\} (\S+)$',
            metrics, re.MULTILINE)
        return float(found.group(1)) if found else None

    def seconds_until_live(self, index: int, percent: float) -> float:
        started = time.monotonic()
        while self.live_canary(index) != percent:
            assert time.monotonic() - started < 10, f"canary {percent} not live on {index}"
            time.sleep(0.05)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tls: ServerTLS, https_cog: CogServer,
          candidate_cog: CogServer) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("console")
    with sync_database("sqlite", workdir) as database_url:
        gateways: list[GatewayProcess] = []
        try:
            for _ in range(2):
                config = live_config(database_url=database_url, workdir=workdir, tls=tls,
                                     cog_url=https_cog.url, cog_token=COG_WEBHOOK_TOKEN,
                                     port=listen_port(), guard_interval_s=1.0)
                config["providers"]["candidate-cog"] = {
                    "kind": "cog", "base_url": candidate_cog.url,
                    "webhook_auth_token": COG_WEBHOOK_TOKEN}
                config["routes"][0].update(
                    candidate="candidate-cog",
                    guard={"max_error_rate": 0.5, "min_samples": 20, "window_s": 300},
                    caller_key="input:prompt",  # each prompt its own caller: both arms serve
                    shadow_policy={"allow_fields": ["prompt"], "max_input_bytes": 1024})
                config["admin"] = {"tokens": [{"name": "ops-alice", "token": ADMIN}]}
                gateways.append(GatewayProcess(config, workdir, ca_file=tls.ca_file).start())
            made = Stack(gateways, tls.ca_file)
            yield made
            made.close()
        finally:
            for gateway in gateways:
                gateway.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("CUTOVER_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    with playwright_sync.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable)
        yield p, launched
        launched.close()


def _run(stack: Stack, index: int, prompt: str) -> Any:
    return stack.clients[index].run(ROUTE, input={"prompt": prompt})


def _act(page: Any, form: str, reason: str, percent: str | None = None) -> None:
    """Fill one action form of the route page and submit it; wait for the applied note."""
    scope = page.locator(f"form[action$='/{form}']")
    if percent is not None:
        scope.get_by_label(re.compile("share|shadowed")).fill(percent)
    scope.get_by_label("Reason").fill(reason)
    scope.get_by_role("button").click()
    page.get_by_role("status").filter(has_text="applied").wait_for()


def test_an_operator_runs_a_migration_from_the_console(stack: Stack, browser: Any,
                                                      shots: Path) -> None:
    playwright, chromium_browser = browser
    context = chromium_browser.new_context(ignore_https_errors=True,
                                           viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console",
            lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error" else None)

    page.goto(f"{stack.url()}/admin/")
    assert page.url.endswith("/admin/console/sign-in")  # no session: the sign-in page
    page.screenshot(path=str(shots / "sign-in.png"))
    page.get_by_label("Admin token").fill(ADMIN)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("rowheader").get_by_role("link", name=ROUTE).wait_for()
    assert ADMIN not in page.url
    cookie = next(c for c in context.cookies() if "cutover_console" in c["name"])
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert cookie["name"].startswith("__Secure-") and cookie["value"] != ADMIN

    assert _run(stack, 0, "warm up") == "WARM UP"
    page.get_by_role("rowheader").get_by_role("link", name=ROUTE).wait_for()
    page.screenshot(path=str(shots / "routes.png"), full_page=True)
    page.get_by_role("rowheader").get_by_role("link", name=ROUTE).click()

    _act(page, "canary", "first step: 10 % of callers", "10")
    assert page.locator("#canary-now").inner_text() == "10 %"
    assert stack.seconds_until_live(1, 10.0) < LIVE_WITHIN_S
    _act(page, "canary", "no errors at 10 %, going to half", "50")
    assert stack.seconds_until_live(1, 50.0) < LIVE_WITHIN_S
    _act(page, "shadow", "compare the candidate on every control prediction", "100")
    answers = [_run(stack, i % 2, f"user {i}") for i in range(10)]  # figures on both arms
    assert {a.endswith("!") for a in answers} == {True, False}, answers
    page.locator(".arms").filter(has_text="candidate-cog").wait_for()
    # the live region refreshed by itself with the new figures: the 10 predictions made
    # since the route's last change, where its window starts (docs/canary.md, "Numbers")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.arms tbody tr')]"
        ".reduce((n, r) => n + Number(r.cells[2].innerText), 0) >= 10", timeout=15_000)
    page.frame_locator("iframe.report").get_by_role("heading", name=re.compile("Shadow report"))\
        .wait_for()  # the report inline
    page.screenshot(path=str(shots / "route.png"), full_page=True)
    page.locator("iframe.report").scroll_into_view_if_needed()  # full pages skip iframes
    page.screenshot(path=str(shots / "route-report-inline.png"))

    with context.expect_page() as opened:
        page.get_by_role("link", name="Open the shadow report").click()
    report = opened.value
    report.wait_for_load_state()
    assert "shadow" in report.content().lower() and ROUTE in report.content()
    report.screenshot(path=str(shots / "shadow-report.png"), full_page=True)
    report.close()

    _act(page, "rollback", "answers end in a bang")
    assert stack.spec(1)["canary_percent"] == 0
    assert stack.seconds_until_live(1, 0.0) < LIVE_WITHIN_S

    # a request without the session, or with a wrong CSRF token, changes nothing
    origin = {"Origin": stack.url()}
    url = f"{stack.url()}/admin/console/routes/{ROUTE}/canary"
    forged = context.request.post(url, form={"percent": "100", "reason": "x", "csrf": "no"},
                                  headers=origin, max_redirects=0)
    assert forged.status == 403
    stranger = playwright.request.new_context(ignore_https_errors=True)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    anonymous = stranger.post(url, form={"percent": "100", "reason": "x", "csrf": csrf},
                              headers=origin, max_redirects=0)
    assert anonymous.status == 401
    stranger.dispose()
    assert stack.spec(0)["canary_percent"] == 0

    _act(page, "promote", "the bang is what we want: candidate-cog is the control")
    promoted = stack.spec(1)
    assert (promoted["provider"], promoted["candidate"]) == ("candidate-cog", None)
    started = time.monotonic()
    while _run(stack, 1, "after") != "AFTER!":  # the other process serves from the new control
        assert time.monotonic() - started < LIVE_WITHIN_S
    page.screenshot(path=str(shots / "route-promoted.png"), full_page=True)

    other = context.new_page()  # the same session on the second process
    other.goto(f"{stack.url(1)}/admin/console/")
    assert "ops-alice" in other.content() and other.url.endswith("/admin/console/")
    other.close()

    page.get_by_role("button", name="Sign out").click()
    page.get_by_text("You are signed out").wait_for()
    page.goto(f"{stack.url()}/admin/console/")
    assert page.url.endswith("/sign-in")
    assert not errors, errors  # no CSP violation, no script error
    context.close()
