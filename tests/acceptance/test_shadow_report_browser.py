"""The shadow report page in a real Chromium (docs/shadow.md, "The report"): for the
worst pairs the inputs' thumbnails, the image difference heat map, the word diff of the
texts, and the verdict's caveats at the top all render under the page's own CSP, with
nothing loaded from another host. Screenshots go to ``$CUTOVER_SHADOW_SCREENSHOTS`` or a
temporary directory (printed)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from pathlib import Path

import pytest
from PIL import Image

from contracts.job import JobState
from shadow import compare, report
from shadow.inputs import input_excerpt
from shadow.model import Coverage
from shadow.outcome import Outcome, OutputFile
from tests.support.browser import chromium

playwright_sync = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def _png(path: Path, shift: int) -> OutputFile:
    image = Image.new("RGB", (96, 64), (90, 120, 150))
    image.paste((90 + shift, 120, 150), (48, 0, 96, 64))  # a colour shift on the right half
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())
    return OutputFile(content_type="image/png", size_bytes=len(buffer.getvalue()),
                      sha256=hashlib.sha256(buffer.getvalue()).hexdigest(),
                      url=f"https://files.gw.test/{path.name}", path=path)


def _outcome(output: object, files: tuple[OutputFile, ...] = ()) -> Outcome:
    return Outcome(status=JobState.COMPLETED, output=output, files=files)


async def _page(tmp_path: Path) -> str:
    control, candidate = _png(tmp_path / "a.png", 0), _png(tmp_path / "b.png", 10)
    image_pair = await compare.compare(
        _outcome(control.url, (control,)), _outcome(candidate.url, (candidate,)),
        pair_id="p-image")
    text_pair = await compare.compare(
        _outcome("The quick brown fox jumps over the lazy dog. " * 30),
        _outcome("The quick red fox jumps over the sleepy dog. " * 30), pair_id="p-text")
    text_pair = text_pair.model_copy(update={"input_excerpt": input_excerpt(
        {"prompt": "Write about a fox. " * 60, "image": "data:image/png;base64," + "A" * 3000,
         "style": "https://files.gw.test/style.png"})})
    same = await compare.compare(_outcome("same"), _outcome("same"))
    built = report.build("acme/draw", [image_pair, text_pair] + [same] * 8, [same] * 5,
                         coverage=Coverage(shadowed=10, skipped={"policy_size": 4}))
    return report.render(await report.with_previews(built), "html")


def test_the_worst_pairs_render_with_their_heat_map_diff_and_caveats(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    page_file = tmp_path / "report.html"
    page_file.write_text(asyncio.run(_page(tmp_path)), encoding="utf-8")
    where = os.environ.get("CUTOVER_SHADOW_SCREENSHOTS")
    shots = Path(where) if where else tmp_path_factory.mktemp("shadow-screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    print(f"shadow report screenshots: {shots}")
    executable = chromium()
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            page.goto(page_file.as_uri())
            page.screenshot(path=str(shots / "report.png"), full_page=True)

            caveats = page.locator("#caveats")
            assert caveats.is_visible()
            assert "baseline too small" in caveats.inner_text()
            assert "4 of 14 eligible primaries" in caveats.inner_text()
            assert page.locator("#verdict").bounding_box()["y"] < caveats.bounding_box()["y"]
            assert caveats.bounding_box()["y"] < page.locator("#agreement").bounding_box()["y"]
            caveats.screenshot(path=str(shots / "verdict-caveats.png"))

            heat = page.locator(".heat img").first
            heat.scroll_into_view_if_needed()
            assert heat.evaluate("img => img.complete && img.naturalWidth") == 96
            assert "largest 10 levels" in page.locator(".heat figcaption").first.inner_text()
            page.locator(".heat").first.screenshot(path=str(shots / "image-difference.png"))
            thumbnails = page.locator(".side img")
            assert thumbnails.count() == 2
            assert all(thumbnails.nth(i).evaluate("img => img.naturalWidth") > 0
                       for i in range(2))

            shown = page.locator(".input").first
            assert shown.locator("a").first.get_attribute("href") == (
                "https://files.gw.test/style.png")
            folded = shown.locator("details")
            assert not folded.locator("pre").is_visible()
            folded.locator("summary").click()
            assert folded.locator("pre").is_visible()
            assert "<image/png data: URI, 3022 characters>" in folded.inner_text()
            shown.screenshot(path=str(shots / "input.png"))

            diff = page.locator(".wdiff").first
            assert diff.locator("del").first.inner_text().startswith("-brown")
            assert diff.locator("ins").first.inner_text().startswith("+red")
            diff.screenshot(path=str(shots / "text-diff.png"))

            good = page.locator("tr.good td").first
            bad = page.locator("tr.bad td").first
            assert good.evaluate("td => getComputedStyle(td).color") != bad.evaluate(
                "td => getComputedStyle(td).color")
            assert good.inner_text().startswith("✔") and bad.inner_text().startswith("✘")
            page.locator("#agreement").screenshot(path=str(shots / "agreement.png"))
        finally:
            browser.close()
    assert [url for url in requests if not url.startswith(("file:", "data:"))] == []
    assert not [text for text in console if "Content Security Policy" in text]
    assert {p.name for p in shots.iterdir()} >= {
        "report.png", "verdict-caveats.png", "image-difference.png", "text-diff.png",
        "input.png"}
