"""A heat map of the per-pixel difference of two images, for the report's worst pairs
(docs/shadow.md, "The report").

Pillow, as the image measures (:mod:`shadow.media`). The candidate is resized to the
control's size when they differ; per pixel the largest channel difference (levels,
0-255) is taken, amplified so the largest difference is full scale (a 10-level colour
shift invisible in thumbnails shows plainly), and coloured black (same) through red to
yellow (most different). The map is scaled to fit :data:`MAX_PX` and returned as a PNG
``data:`` URI, so the page stays self-contained.
"""

from __future__ import annotations

import base64
import io

from pydantic import BaseModel, ConfigDict

from shadow import media

__all__ = ["MAX_PX", "HeatMap", "heat_map"]

MAX_PX = 512
"""The heat map's largest side in pixels."""


class HeatMap(BaseModel):
    """One image pair's difference: the map, its amplification, and the largest and mean
    per-pixel difference in levels (0-255, largest channel) before amplification."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_uri: str
    gain: float
    max_levels: int
    mean_levels: float


def heat_map(control: bytes, candidate: bytes) -> HeatMap:
    """The :class:`HeatMap` of two encoded images.

    Raises
    ------
    shadow.media.ImageError
        Either side does not decode as an image.
    """
    from PIL import Image, ImageChops, ImageOps, ImageStat

    a, b = media.decode(control), media.decode(candidate)
    if b.size != a.size:
        b = b.resize(a.size, Image.Resampling.BILINEAR)
    red, green, blue = ImageChops.difference(a, b).split()
    levels = ImageChops.lighter(ImageChops.lighter(red, green), blue)
    largest = levels.getextrema()[1]
    largest = int(largest if isinstance(largest, int | float) else 0)
    mean = float(ImageStat.Stat(levels).mean[0])
    gain = 255.0 / largest if largest else 1.0
    amplified = levels.point(lambda value: min(255, round(value * gain)))
    coloured = ImageOps.colorize(amplified, black="#000000", mid="#d01010", white="#ffff40")
    coloured.thumbnail((MAX_PX, MAX_PX), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    coloured.save(buffer, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return HeatMap(data_uri=uri, gain=gain, max_levels=largest, mean_levels=mean)
