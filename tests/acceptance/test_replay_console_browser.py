"""The console's Replay card in a real browser (Playwright driving Debian's Chromium)
against a gateway process over HTTPS in front of two real Cog servers (examples/noise and
its red-shifted candidate; docs/cutover-day.md, "Replaying recorded inputs").

An operator starts a replay of the route's recorded inputs from the route page, sees its
progress refresh by itself, stops it, resumes it, watches it finish, and opens its
report, which says it is that replay and finds the colour cast. A viewer sees the card
and cannot start or stop anything. Screenshots go to ``$CUTOVER_CONSOLE_SCREENSHOTS`` or
a temporary directory (printed). Select with ``-m browser``.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import chromium
from tests.support.process import GatewayProcess, listen_port
from tests.support.replay import API_TOKEN, ROUTE, noise_cogs, record, replay_config
from tests.support.tls import ServerTLS

playwright_sync = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.cog, pytest.mark.browser, pytest.mark.timeout(300)]

ADMIN = "adm_replay_console"  # test values, not credentials
VIEWER = "view_replay_console"
INPUTS = 60


@pytest.fixture(scope="module")
def gateway(tls: ServerTLS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("replay-console")
    with noise_cogs() as cogs:
        config = replay_config(workdir, listen_port(), cogs, tls=tls, max_concurrent=1,
                               admin=[{"name": "ops-alice", "token": ADMIN},
                                      {"name": "bob", "token": VIEWER, "role": "viewer"}])
        process = GatewayProcess(config, workdir, ca_file=tls.ca_file).start()
        try:
            verify = ssl.create_default_context(cafile=str(tls.ca_file))
            with httpx.Client(base_url=process.url, verify=verify, timeout=60.0,
                              headers={"Authorization": f"Bearer {API_TOKEN}"}) as http, \
                    ThreadPoolExecutor(4) as pool:
                prompts = [f"picture {i % 5} take {i}" for i in range(INPUTS)]
                assert set(pool.map(lambda p: record(http, p), prompts)) == {"succeeded"}
            yield process
        finally:
            process.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("CUTOVER_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("replay-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"replay console screenshots: {path}")
    return path


def _sign_in(browser: Any, url: str, token: str) -> tuple[Any, Any]:
    context = browser.new_context(ignore_https_errors=True,
                                  viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.goto(f"{url}/admin/")
    page.get_by_label("Admin token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("rowheader").get_by_role("link", name=ROUTE).click()
    page.locator("#replay-h").wait_for()
    return context, page


def _state(page: Any, state: str) -> None:
    page.locator("#replay-state", has_text=re.compile(f"^{state}$")).wait_for(timeout=60_000)


def test_an_operator_replays_recorded_inputs_from_the_console(gateway: GatewayProcess,
                                                              shots: Path) -> None:
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium())
        context, page = _sign_in(browser, gateway.url, ADMIN)
        errors: list[str] = []
        page.on("console",
                lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error" else None)
        assert "No replay yet" in page.locator("#replay-live").inner_text()

        start = page.locator("#replay-start")
        start.get_by_label(re.compile("Recorded since")).fill("1h")
        start.get_by_label(re.compile("At most")).fill(str(INPUTS))
        start.get_by_label(re.compile("for the baseline")).fill("50")
        start.get_by_role("button", name="Start the replay").click()
        _state(page, "running")
        page.locator("#replay-stop").click()  # at a budget of 1 it is far from done
        _state(page, "stopped")
        stopped = page.locator("#replay-counts").inner_text()
        assert f"of {INPUTS} inputs handed out" in stopped
        page.screenshot(path=str(shots / "replay-stopped.png"), full_page=True)

        page.locator("#replay-resume").click()
        _state(page, "running")
        # the card refreshes by itself while it runs, to the end
        page.wait_for_function(
            "() => Number(document.querySelector('#replay-progress').value) > 0.3",
            timeout=60_000)
        page.locator("#replay-live").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "replay-running.png"))
        _state(page, "finished")
        done = page.locator("#replay-counts").inner_text()
        assert done.startswith("100 %") and f"{INPUTS} of {INPUTS} inputs handed out" in done
        assert "50 % also on the control" in done
        page.locator("#replay-live").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "replay-finished.png"))

        with context.expect_page() as opened:
            page.get_by_role("link", name="Open the replay's report").click()
        report = opened.value
        report.wait_for_load_state()
        assert report.locator("h1").inner_text() == f"Shadow report (replay): {ROUTE}"
        header = report.locator("#replay").inner_text()
        assert "(finished)" in header and f"{INPUTS} inputs, {INPUTS} sent" in header
        assert report.locator("#verdict").inner_text().startswith("BLOCK")
        report.screenshot(path=str(shots / "replay-report.png"), full_page=True)
        assert not errors, errors  # no CSP violation, no script error
        context.close()

        viewer, seen = _sign_in(browser, gateway.url, VIEWER)
        _state(seen, "finished")
        assert seen.locator("#replay-start button").is_disabled()
        viewer.close()
        browser.close()
