"""The drift measures a shadow comparison may carry (:mod:`shadow.compare`), by name.

Its own module so that route settings (:mod:`shadow.thresholds`, read at the gateway's
start-up) can check margin names without importing the comparison itself.
"""

from __future__ import annotations

from shadow.text_measures import TEXT_MEASURES

__all__ = ["MEASURES"]

MEASURES: dict[str, str] = {
    "error_class": "both failed, with different error classes (0 or 1)",
    "list_length": "lists of different lengths (count)",
    "number": "largest relative difference of numbers at one path (0-1)",
    "text": "1 - normalized similarity of all output text (0-1)",
    "file_size": "largest relative size difference of paired files (0-1)",
    "file_bytes": "share of paired files whose bytes differ (0-1)",
    "image_size": "largest relative change of width or height (0-1)",
    "image_phash": "largest perceptual-hash distance (bits, 0-64)",
    "image_color": "largest per-channel thumbnail difference (levels, 0-255)",
    **TEXT_MEASURES,
}
"""Every drift measure a comparison may carry, with its unit."""
