"""Inline SVG plots for the HTML report: no scripts, no web fonts, no other hosts.

:func:`ecdf` draws empirical cumulative distributions (one step line per arm) of durations
in seconds: x is the duration, y the share of predictions at or under it (0-100 %).
:func:`rates` draws shares with their confidence intervals and maximums.
Lines are drawn with ``shape-rendering="crispEdges"`` in the fixed :data:`COLORS`, so a
screenshot shows them in exactly those colours (the browser test counts such pixels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

__all__ = ["COLORS", "ecdf", "nice_ticks", "rates"]

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


def rates(rows: Sequence[tuple[str, float, float, float, float | None]], *, title: str) -> str:
    """Horizontal bars of shares (0-1) with their confidence intervals, one ``<svg>``.

    Each row is ``(label, share, low, high, maximum or None)``: a bar to ``share``, a
    whisker from ``low`` to ``high`` and, when given, a red tick at the maximum allowed.
    """
    row_h, label_w, plot_w = 22, 190, 330
    height = 46 + row_h * len(rows)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot rates" role="img" '
        f'width="{label_w + plot_w + 70}" height="{height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="4" y="16" class="plot-title">{escape(title)}</text>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + plot_w * tick
        parts.append(f'<line x1="{x:.1f}" y1="24" x2="{x:.1f}" y2="{height - 16}" '
                     'stroke="#eeeeee" shape-rendering="crispEdges"/>'
                     f'<text x="{x:.1f}" y="{height - 4}" class="tick" '
                     f'text-anchor="middle">{tick:.0%}</text>')
    for index, (label, share, low, high, maximum) in enumerate(rows):
        y = 28 + row_h * index
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" class="tick" '
                     f'text-anchor="end">{escape(label)}</text>'
                     f'<rect class="rate-bar" x="{label_w}" y="{y + 3}" '
                     f'width="{plot_w * share:.1f}" height="12" fill="#8da0b3"/>'
                     f'<line x1="{label_w + plot_w * low:.1f}" y1="{y + 9}" '
                     f'x2="{label_w + plot_w * high:.1f}" y2="{y + 9}" stroke="#222222" '
                     'stroke-width="2" shape-rendering="crispEdges"/>'
                     f'<text x="{label_w + plot_w + 6}" y="{y + 12}" class="tick">'
                     f"{share:.1%}</text>")
        if maximum is not None:
            x = label_w + plot_w * maximum
            parts.append(f'<line class="rate-max" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" '
                         f'y2="{y + 18}" stroke="#d62728" stroke-width="2" '
                         'shape-rendering="crispEdges"/>')
    parts.append("</svg>")
    return "\n".join(parts)
