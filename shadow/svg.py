"""Inline SVG plots for the HTML report: no scripts, no web fonts, no other hosts.

:func:`ecdf` draws empirical cumulative distributions (one step line per arm) of durations
in seconds: x is the duration, y the share of predictions at or under it (0-100 %).
Lines are drawn with ``shape-rendering="crispEdges"`` in the fixed :data:`COLORS`, so a
screenshot shows them in exactly those colours (the browser test counts such pixels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

__all__ = ["COLORS", "ecdf", "nice_ticks"]

COLORS = {"control": "#1f77b4", "candidate": "#ff7f0e"}
"""Stroke colour of each arm (RGB 31,119,180 and 255,127,14)."""

Scale = Callable[[float], float]
_WIDTH, _HEIGHT = 560, 250
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 46, 40


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (about ``count`` of them)."""
    if not high > 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < high - 1e-12:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def ecdf(series: Mapping[str, Sequence[float]], *, title: str, unit: str = "s") -> str:
    """An ECDF plot of each named series (sorted or not), as one ``<svg>`` element.

    Series named in :data:`COLORS` get that colour; an empty series is listed in the legend
    as "no data". The x axis runs from 0 to the largest value across series.
    """
    values = [v for found in series.values() for v in found if math.isfinite(v)]
    ticks = nice_ticks(max(values) if values else 1.0)
    x_max = ticks[-1]
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def x_of(value: float) -> float:
        return _LEFT + plot_w * min(value, x_max) / x_max

    def y_of(share: float) -> float:
        return _TOP + plot_h * (1 - share)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" '
        f'width="{_WIDTH}" height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_LEFT}" y="18" class="plot-title">{escape(title)}</text>',
        *_axes(ticks, unit, x_of, y_of),
    ]
    for index, (name, found) in enumerate(series.items()):
        colour = COLORS.get(name, "#555555")
        points = sorted(v for v in found if math.isfinite(v))
        if points:
            parts.append(_steps(points, x_of, y_of, colour, name))
        parts.append(_legend(index, name, colour, len(points)))
    parts.append("</svg>")
    return "\n".join(parts)


def _axes(ticks: list[float], unit: str, x_of: Scale, y_of: Scale) -> list[str]:
    left, right = x_of(0.0), x_of(ticks[-1])
    top, bottom = y_of(1.0), y_of(0.0)
    parts = [f'<g class="axes" stroke="#999999" stroke-width="1" shape-rendering="crispEdges">'
             f'<line x1="{left:.1f}" y1="{bottom:.1f}" x2="{right:.1f}" y2="{bottom:.1f}"/>'
             f'<line x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{bottom:.1f}"/></g>']
    for tick in ticks:
        x = x_of(tick)
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16:.1f}" class="tick" '
                     f'text-anchor="middle">{_fmt(tick)}</text>')
    for share in (0.0, 0.5, 1.0):
        y = y_of(share)
        parts.append(f'<text x="{left - 6:.1f}" y="{y + 4:.1f}" class="tick" '
                     f'text-anchor="end">{share:.0%}</text>')
        parts.append(f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{right:.1f}" y2="{y:.1f}" '
                     'stroke="#eeeeee" shape-rendering="crispEdges"/>')
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 32:.1f}" class="tick" '
                 f'text-anchor="middle">{escape(unit)}</text>')
    return parts


def _steps(points: list[float], x_of: Scale, y_of: Scale, colour: str, name: str) -> str:
    n = len(points)
    coords = [(x_of(0.0), y_of(0.0))]
    for rank, value in enumerate(points, start=1):
        x = x_of(value)
        coords.append((x, coords[-1][1]))
        coords.append((x, y_of(rank / n)))
    coords.append((x_of(points[-1]), y_of(1.0)))
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    return (f'<polyline class="series series-{escape(name)}" fill="none" stroke="{colour}" '
            f'stroke-width="3" shape-rendering="crispEdges" points="{path}"/>')


def _legend(index: int, name: str, colour: str, count: int) -> str:
    x = _LEFT + 200 * index  # one row between the title and the plot
    y = 36
    label = f"{name} (n={count})" if count else f"{name} (no data)"
    return (f'<g class="legend"><line x1="{x}" y1="{y - 4}" x2="{x + 14}" y2="{y - 4}" '
            f'stroke="{colour}" stroke-width="3" shape-rendering="crispEdges"/>'
            f'<text x="{x + 20}" y="{y}" class="tick">{escape(label)}</text></g>')


def _fmt(value: float) -> str:
    return f"{value:g}"
