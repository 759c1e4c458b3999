"""The admin shadow-report page in real headless Chromium: plots and images render, offline.

The page is the one the gateway serves, ``GET /admin/routes/{route}/shadow-report`` with
the admin token (sent by the browser itself), over real shadow pairs: control
predictions shadowed on the candidate, their outputs solid-colour PNGs delivered as
``data:`` URIs and copied to owned storage like any output (magenta everywhere, except
one candidate that answers green). Chromium is driven over the DevTools protocol
(:mod:`tests.support.cdp`): every request the page makes is recorded, and a screenshot
is checked pixel by pixel with Pillow inside each plot's and each image's box: the two
ECDF plots draw in the arms' exact colours, the rate plot draws, and both images show at
full size, and so does their difference heat map. The page is rendered the same whatever
the store, so this runs on SQLite only.
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest
from PIL import Image

from contracts.job import JobState
from shadow import svg
from tests.support import cdp
from tests.support.gateway import VERSION, GatewayHarness

pytestmark = pytest.mark.timeout(300)

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_chromium_test"  # a test value, not a credential
MAGENTA, GREEN, WHITE = (255, 0, 255), (0, 200, 0), (255, 255, 255)
HEAT_MAX = (255, 255, 64)  # the heat map's most-different colour (shadow/heatmap.py)
SIDE_PX = 96
PAIRS = 12


@pytest.fixture
def backend() -> str:
    return "sqlite"


def png_uri(colour: tuple[int, int, int]) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (SIDE_PX, SIDE_PX), colour).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


async def shadowed_pairs(make_gateway: Any) -> GatewayHarness:
    """A gateway whose route has ``PAIRS`` finished pairs, one of them green."""
    gateway = await make_gateway(
        providers={"fake": {"kind": "fake", "max_concurrency": PAIRS},
                   "fake2": {"kind": "fake", "max_concurrency": PAIRS}},
        routes=[{"model": "acme/echo", "version": VERSION, "provider": "fake",
                 "candidate": "fake2", "shadow_percent": 100, "baseline_percent": 0,
                 "shadow_policy": {"allow_fields": ["prompt"]},
                 "shadow_budget": {"max_concurrent": PAIRS, "max_per_hour": 100}}],
        admin={"tokens": [ADMIN_TOKEN]},
    )
    made = [await gateway.create({"version": VERSION, "input": {"prompt": f"p{i}"}})
            for i in range(PAIRS)]
    await gateway.settle()
    owners = [await (await gateway.client.get(
        f"/admin/predictions/{m['id']}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )).json() for m in made]
    controls = [(owner["id"], png_uri(MAGENTA)) for owner in owners]
    shadows = [(owner["shadows"][0]["id"], png_uri(GREEN if index == 0 else MAGENTA))
               for index, owner in enumerate(owners)]
    # the controls start first and finish last: both arms' queue and run times differ,
    # so neither ECDF line hides the other
    for jobs, state in ((controls, JobState.RUNNING), (shadows, JobState.RUNNING),
                        (shadows, JobState.COMPLETED), (controls, JobState.COMPLETED)):
        for job_id, output in jobs:
            fields = {"output": output} if state == JobState.COMPLETED else {}
            assert await gateway.deliver(job_id, state, **fields) == 200
        await gateway.settle()
    return gateway


def pixels_in(shot: Image.Image, box: cdp.Box) -> Counter[tuple[int, int, int]]:
    crop = shot.crop((round(box.x), round(box.y), round(box.x + box.width),
                      round(box.y + box.height)))
    return Counter({colour: n for n, colour in crop.getcolors(maxcolors=1 << 24) or []})


async def test_the_admin_page_renders_its_plots_and_images_in_chromium(make_gateway):
    gateway = await shadowed_pairs(make_gateway)
    url = str(gateway.client.make_url(f"/admin/routes/{ROUTE}/shadow-report"))
    async with cdp.launch() as page:
        loaded = await page.load(url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        text = await page.evaluate("document.body.innerText")
        plots = await page.boxes("svg")
        images = await page.boxes("img")
        shot = Image.open(io.BytesIO(await page.screenshot())).convert("RGB")

    assert loaded.status == 200, text[:500]
    origin = urlsplit(url).netloc
    elsewhere = [u for u in loaded.requests if urlsplit(u).scheme in ("http", "https", "ws",
                                                                     "wss")
                 and urlsplit(u).netloc != origin]
    assert not elsewhere, f"the page asked other hosts: {elsewhere}"
    fetched = [u for u in loaded.requests if not u.startswith("data:")
               and urlsplit(u).path != "/favicon.ico"]  # the browser's own, not the page's
    assert fetched == [url]
    assert f"HOLD {ROUTE}: {PAIRS} pairs" in text

    assert len(plots) == 3, plots  # the rates, then the queue and run time ECDFs
    for box in plots:
        assert box.width > 100 and box.height > 50, box
        drawn = pixels_in(shot, box)
        inked = sum(n for colour, n in drawn.items() if colour != WHITE)
        assert inked >= 0.01 * box.width * box.height, f"a blank plot at {box}"
    for box in plots[1:]:
        drawn = pixels_in(shot, box)
        for arm, colour in svg.COLORS.items():
            assert drawn[hex_rgb(colour)] >= 100, f"no {arm} line in the ECDF at {box}"

    # control, candidate, then their difference heat map: every pixel differs fully,
    # so the map is the top of its scale (yellow) throughout
    assert len(images) == 3 and all(box.loaded for box in images), images
    for box, colour in zip(images, (MAGENTA, GREEN, HEAT_MAX), strict=True):
        assert (box.width, box.height) == (SIDE_PX, SIDE_PX), box
        assert pixels_in(shot, box)[colour] >= 0.95 * SIDE_PX * SIDE_PX, f"blank image {box}"
