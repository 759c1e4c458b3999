"""Measures on file contents: images and text (docs/shadow.md, "Images", "Text").

CPU-bound and synchronous; :mod:`shadow.compare` runs them in a worker thread. Pillow,
ImageHash (which brings NumPy, SciPy and PyWavelets) and RapidFuzz are imported on first
use, not with the module: importing ``shadow`` stays cheap for every gateway process and
command-line call that never compares a pair.

- Images (Pillow + ImageHash): the dimensions of each side; the perceptual distance, the
  Hamming distance in bits (0-64) between the two 64-bit DCT perceptual hashes (shape and
  luminance layout, blind to pixel noise); the colour distance, the largest per-channel
  mean absolute difference between 16x16 box-filtered thumbnails, in 8-bit levels (0-255;
  sees a colour cast that the grey-level hash cannot, while averaging pixel noise away).
- Text (RapidFuzz): ``1 - similarity`` of the two texts after Unicode NFKC, case folding
  and whitespace collapsing, the similarity being the normalized Indel ratio (0-1).
"""

from __future__ import annotations

import base64
import io
import re
import struct
import unicodedata
import warnings
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "MAX_IMAGE_PIXELS",
    "MAX_TEXT_CHARS",
    "ImageComparison",
    "ImageError",
    "compare_images",
    "decode_text",
    "normalize_text",
    "preview_data_uri",
    "text_distance",
]

MAX_IMAGE_PIXELS = 64_000_000
"""Images with more pixels are refused (ImageError), not decoded."""
MAX_TEXT_CHARS = 20_000
"""Only the first this-many characters of each text are compared."""
_THUMB_PX = 16
# What Pillow raises on malformed or hostile files (a fuzzed PNG gives SyntaxError, a
# truncated one OSError, odd headers ValueError, struct.error or IndexError).
_DECODE_ERRORS = (
    OSError, ValueError, SyntaxError, EOFError, IndexError, TypeError, struct.error,
    Warning,
)
_WHITESPACE = re.compile(r"\s+")


class ImageError(ValueError):
    """Bytes that claim to be an image but do not decode as one."""


class ImageComparison(BaseModel):
    """Two images measured against each other.

    Attributes
    ----------
    control_size, candidate_size : tuple of int
        ``(width, height)`` in pixels.
    size_delta : float
        ``max(|dw| / max(w), |dh| / max(h))``: 0 for equal dimensions, up to 1.
    phash_bits : int
        Hamming distance between the perceptual hashes, 0-64 bits.
    color_levels : float
        Largest per-channel mean absolute thumbnail difference, 0-255 levels.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    control_size: tuple[int, int]
    candidate_size: tuple[int, int]
    size_delta: float
    phash_bits: int
    color_levels: float


def compare_images(control: bytes, candidate: bytes) -> ImageComparison:
    """Measure two encoded images (any format Pillow reads; first frame only).

    Raises
    ------
    ImageError
        Either side does not decode, or has more than :data:`MAX_IMAGE_PIXELS` pixels.
    """
    import imagehash  # heavy (NumPy, SciPy): on first use, see the module docstring

    image_a, image_b = _decode(control), _decode(candidate)
    (wa, ha), (wb, hb) = image_a.size, image_b.size
    size_delta = max(abs(wa - wb) / max(wa, wb), abs(ha - hb) / max(ha, hb))
    phash_bits = int(imagehash.phash(image_a) - imagehash.phash(image_b))
    return ImageComparison(
        control_size=(wa, ha),
        candidate_size=(wb, hb),
        size_delta=size_delta,
        phash_bits=phash_bits,
        color_levels=_color_levels(image_a, image_b),
    )


def decode(data: bytes) -> Image.Image:
    """The first frame as RGB; raises :class:`ImageError` (undecodable, too large, empty)."""
    return _decode(data)


def _decode(data: bytes) -> Image.Image:
    from PIL import Image

    try:
        with warnings.catch_warnings():  # a decompression bomb is an error here, not a warning
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageError(f"image of {width}x{height} pixels is too large to compare")
            if width == 0 or height == 0:
                raise ImageError("image has no pixels")
            return image.convert("RGB")
    except (*_DECODE_ERRORS, Image.DecompressionBombError) as exc:
        raise ImageError(f"not a decodable image: {type(exc).__name__}: {exc}") from exc


def _color_levels(image_a: Image.Image, image_b: Image.Image) -> float:
    from PIL import Image, ImageChops, ImageStat

    thumb = (_THUMB_PX, _THUMB_PX)
    box = Image.Resampling.BOX
    difference = ImageChops.difference(image_a.resize(thumb, box), image_b.resize(thumb, box))
    return float(max(ImageStat.Stat(difference).mean))


def preview_data_uri(data: bytes, max_px: int = 256) -> str:
    """A PNG ``data:`` URI of the image scaled to fit ``max_px`` x ``max_px`` pixels.

    Raises
    ------
    ImageError
        The bytes do not decode as an image.
    """
    from PIL import Image

    image = _decode(data)
    image.thumbnail((max_px, max_px), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def normalize_text(text: str) -> str:
    """NFKC, case-folded, whitespace runs collapsed to one space, stripped, truncated."""
    folded = unicodedata.normalize("NFKC", text[: MAX_TEXT_CHARS * 2]).casefold()
    return _WHITESPACE.sub(" ", folded).strip()[:MAX_TEXT_CHARS]


def text_distance(control: str, candidate: str) -> float:
    """``1 - similarity`` of the normalized texts: 0.0 same, 1.0 nothing in common."""
    from rapidfuzz import fuzz

    a, b = normalize_text(control), normalize_text(candidate)
    if a == b:
        return 0.0
    return 1.0 - fuzz.ratio(a, b) / 100.0


def decode_text(data: bytes) -> str:
    """UTF-8 text of a file's bytes, undecodable bytes replaced (U+FFFD)."""
    return data[: MAX_TEXT_CHARS * 4].decode("utf-8", errors="replace")
