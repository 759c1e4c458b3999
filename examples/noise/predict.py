"""Noise: a nondeterministic image model of our own, and a candidate that differs a little.

``prompt`` picks a picture (a two-colour gradient and four discs, all derived from the
prompt's SHA-256), then every pixel is blended with uniform random noise (15 % weight,
about 11 levels of standard deviation per channel). Without ``seed`` two runs of the same
prompt differ in every pixel; with ``seed`` they are identical. It answers one PNG.

``CandidatePredictor`` is the same model with one deliberate, small difference: the red
channel is lifted by ``RED_SHIFT_LEVELS`` (10 of 255 levels), a colour cast a person barely
sees. Select it with ``COG_PREDICT_TYPE_STUB=predict.py:CandidatePredictor``.

With ``NOISE_FAIL`` set in the server's environment (to any non-empty value), every
prediction of either class fails: how ``examples/migration.py`` stands in for a bad deploy.
See docs/shadow.md for how cutover tells this change apart from the noise.
"""

import hashlib
import os
import random
import tempfile
from typing import Optional

from cog import BasePredictor, Input, Path
from PIL import Image, ImageDraw, ImageOps

SIZE_PX = 128
NOISE_WEIGHT = 0.15
RED_SHIFT_LEVELS = 10


def render(prompt: str, seed: Optional[int], size_px: int = SIZE_PX, red_shift: int = 0):
    """The picture for ``prompt``, noised from ``seed`` (fresh entropy when None)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    low = digest[0:3]
    high = bytes(255 - level for level in low)  # a contrasting ramp
    ramp = Image.linear_gradient("L").rotate(digest[3] % 4 * 90).resize((size_px, size_px))
    base = ImageOps.colorize(ramp, black=tuple(low), white=tuple(high))
    draw = ImageDraw.Draw(base)
    for shape in range(4):  # four discs, placed and coloured by the digest
        x, y, r, *colour = digest[4 + 6 * shape: 10 + 6 * shape]
        x, y, r = x % size_px, y % size_px, size_px // 10 + r % (size_px // 5)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(colour[:3]))
    rng = random.Random(seed)
    noise = Image.frombytes("RGB", (size_px, size_px), rng.randbytes(size_px * size_px * 3))
    image = Image.blend(base, noise, NOISE_WEIGHT)
    if red_shift:
        red, green, blue = image.split()
        red = red.point(lambda level: min(255, level + red_shift))
        image = Image.merge("RGB", (red, green, blue))
    return image


class Predictor(BasePredictor):
    red_shift = 0

    def predict(
        self,
        prompt: str = Input(default="a quiet lake", description="What to draw"),
        seed: Optional[int] = Input(default=None, description="Fix the noise (optional)"),
    ) -> Path:
        if os.environ.get("NOISE_FAIL"):
            raise RuntimeError("forced failure: NOISE_FAIL is set on this server")
        image = render(prompt, seed, red_shift=self.red_shift)
        path = Path(tempfile.mkdtemp(prefix="noise-")) / "out.png"
        image.save(path, format="PNG")
        return path


class CandidatePredictor(Predictor):
    red_shift = RED_SHIFT_LEVELS
