"""The HTML shadow report in real headless Chromium: plots and images render (a screenshot).

The page is built from real comparisons: control-vs-control and control-vs-candidate
pairs of solid-colour PNGs (magenta control, green candidate in the mismatch shown), with
latencies spread for the plots. The screenshot is checked pixel by pixel with Pillow:
the two ECDF plots draw in the arms' exact colours, and both images show at full size.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter

import pytest
from PIL import Image

from shadow import compare, report, svg
from shadow.outcome import OutputFile
from tests.support.browser import dump_dom, screenshot
from tests.support.shadow import completed

MAGENTA, GREEN = (255, 0, 255), (0, 200, 0)
SIDE_PX = 96


def solid_png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (SIDE_PX, SIDE_PX), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


async def build_page(tmp_path):
    files = {}
    for name, colour in (("control", MAGENTA), ("candidate", GREEN)):
        path = tmp_path / f"{name}.png"
        path.write_bytes(solid_png(colour))
        files[name] = OutputFile(content_type="image/png", size_bytes=path.stat().st_size,
                                 sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                                 path=path, url=f"file-{name}")
    same = files["control"]
    baseline = [await compare.compare(completed(same.url, (same,)), completed(same.url, (same,)))
                for _ in range(25)]
    pairs = [
        await compare.compare(
            completed(same.url, (same,), run_s=1 + i / 10, queue_s=i / 50),
            completed(same.url, (same,), run_s=1.5 + i / 8, queue_s=i / 30),
            pair_id=f"same-{i}",
        )
        for i in range(30)
    ]
    pairs.append(await compare.compare(
        completed(same.url, (same,)),
        completed(files["candidate"].url, (files["candidate"],)), pair_id="green",
    ))
    built = await report.with_previews(report.build("noise:v1", pairs, baseline))
    assert [m.pair.pair_id for m in built.worst] == ["green"]
    page = tmp_path / "report.html"
    page.write_text(report.render(built, "html"), encoding="utf-8")
    return page


@pytest.mark.timeout(300)
async def test_the_report_renders_its_plots_and_images_in_chromium(tmp_path):
    page = await build_page(tmp_path)
    shot = screenshot(page, tmp_path / "report.png", width=1280, height=3000)
    colours = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24) or []
    pixels = Counter({colour: count for count, colour in colours})

    for arm, colour in svg.COLORS.items():
        assert pixels[hex_rgb(colour)] >= 600, f"the {arm} ECDF lines did not render"
    for name, colour in (("control", MAGENTA), ("candidate", GREEN)):
        assert pixels[colour] >= 0.95 * SIDE_PX * SIDE_PX, f"the {name} image did not render"

    dom = dump_dom(page)
    assert dom.count("<svg") == 3 and dom.count("<polyline") == 4
    assert dom.count('class="rate-bar"') >= 3
    assert dom.count('<img src="data:image/png;base64,') == 2
    assert "HOLD noise:v1: 31 pairs" in dom
