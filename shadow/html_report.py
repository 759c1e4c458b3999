"""The report as one self-contained HTML page (docs/shadow.md, "The report").

No scripts, no fonts or styles from other hosts: a Content-Security-Policy in the page
forbids them (``default-src 'none'``), plots are inline SVG (:mod:`shadow.svg`), images
are ``data:`` URIs or the caller's URLs, text diffs are word-level (:mod:`shadow.html_pairs`).
Order: verdict, contract breaks, agreement, latency, cost, worst mismatches, notes.
"""

from __future__ import annotations

from html import escape

from shadow import svg
from shadow.html_pairs import STYLE as PAIRS_STYLE
from shadow.html_pairs import ImageSource, worst_section
from shadow.model import Report
from shadow.noise import Rate
from shadow.outcome import OutputFile

__all__ = ["render_html"]


_CSP = ("default-src 'none'; img-src 'self' data: http: https:; "
        "style-src 'unsafe-inline'")
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top;
  font-size: 13px; }
.verdict { font-size: 16px; font-weight: 600; padding: 10px; border-radius: 4px; }
.verdict-promote { background: #e3f4e1; } .verdict-hold { background: #fff4d6; }
.verdict-block { background: #fde0dd; } .verdict-no-candidate { background: #eeeeee; }
.breaks td.kind { color: #b00020; font-weight: 600; }
.plot .plot-title { font-size: 13px; font-weight: 600; } .plot .tick { font-size: 11px; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.side { border: 1px solid #ddd; padding: 8px; overflow: hidden; }
.side img { max-width: 256px; max-height: 256px; image-rendering: pixelated; margin: 4px; }
pre { white-space: pre-wrap; word-break: break-all; font-size: 12px; background: #f6f6f6;
  padding: 6px; max-height: 300px; overflow: auto; }
table.diff { font-family: monospace; font-size: 12px; }
.diff_add { background: #aaffaa; } .diff_chg { background: #ffff77; }
.diff_sub { background: #ffaaaa; } .diff_header { background: #e0e0e0; }
.caveats { border-left: 4px solid #b26a00; background: #fff4d6; padding: 4px 10px; }
tr.good td:first-child { color: #1b5e20; font-weight: 600; }
tr.bad td:first-child { color: #b00020; }
tr.clear td:first-child { color: #555; }
.mismatch { border-top: 2px solid #888; margin-top: 18px; padding-top: 6px; }
"""


def render_html(report: Report, *, image_src: ImageSource | None = None) -> str:
    """The whole page, UTF-8 text; ``image_src`` as in :func:`shadow.report.render`."""
    source = image_src or _default_src
    title = f"Shadow report{' (replay)' if report.replay else ''}: {report.route}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="verdict verdict-{report.verdict.decision}" id="verdict">'
        f"{escape(report.verdict.line)}</p>",
        _caveats(report),
        _window(report),
        _breaks(report),
        _agreement(report),
        _latency(report),
        _cost(report),
        worst_section(report, source),
        _notes(report),
    ]
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{escape(title)}</title><style>{_STYLE}{PAIRS_STYLE}</style></head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


def _caveats(report: Report) -> str:
    items = "".join(f"<li>{escape(caveat)}</li>" for caveat in report.verdict.caveats)
    return (f'<div id="caveats" class="caveats" role="note"><b>⚠ Caveats of this verdict'
            f"</b><ul>{items}</ul></div>" if items else "")


def _default_src(file: OutputFile, preview: str | None) -> str | None:
    if preview:
        return preview
    if file.url and file.url.startswith(("https://", "http://")):
        return file.url
    return None


def _window(report: Report) -> str:
    since = report.since.isoformat() if report.since else "the first pair"
    replayed = (f'<p id="replay">This report is a {escape(report.replay.line)}.</p>'
                if report.replay else "")
    until = escape(report.generated_at.isoformat())
    return (replayed + f"<p>Pairs from {escape(since)} to {until}: "
            f"{report.pairs} control-vs-candidate, {report.baseline_pairs} control-vs-control "
            "(baseline).</p>"
            + (f'<p id="coverage">Shadows: {escape(report.coverage.line)}.</p>'
               if report.coverage else ""))


def _rate_cells(found: Rate) -> str:
    return (f"<td>{found.count}</td><td>{found.n}</td><td>{found.value:.1%}</td>"
            f"<td>{found.low:.1%} - {found.high:.1%}</td>")


def _breaks(report: Report) -> str:
    rows = "".join(f'<tr><td class="kind">{escape(kind)}</td><td>{count}</td></tr>'
                   for kind, count in report.break_kinds.items())
    table = (f'<table class="breaks"><tr><th>kind</th><th>occurrences</th></tr>{rows}</table>'
             if rows else "<p>None.</p>")
    found = report.contract_breaks
    return (f'<section id="contract-breaks"><h2>Contract breaks</h2>'
            f"<p>{found.count} of {found.n} pairs ({found.value:.1%}; "
            f"{found.confidence:.0%} CI {found.low:.1%} - {found.high:.1%}; "
            f"max {report.thresholds.max_contract_break_rate:.1%}).</p>{table}</section>")


def _agreement(report: Report) -> str:
    head = ("<tr><th>what</th><th>unit</th><th>count</th><th>of</th><th>share</th>"
            f"<th>{report.thresholds.confidence:.0%} CI</th><th>limit</th>"
            "<th>baseline quantile</th><th>candidate median</th><th>baseline median</th></tr>")
    rows = [
        '<tr class="good"><td>✔ status agreement (higher is better)</td><td>pairs</td>'
        f"{_rate_cells(report.status_agreement)}<td></td><td></td><td></td><td></td></tr>",
        '<tr class="bad"><td>✘ any reported difference (lower is better)</td><td>pairs</td>'
        f"{_rate_cells(report.differences)}<td></td><td></td><td></td><td></td></tr>",
    ]
    for summary in report.measures:
        limit = summary.limit
        # a bad share is drawn as bad only when it holds pairs: a measure no pair
        # exceeded is not a failure (the "lower is better" row above says which way)
        over = summary.reported.count > 0
        mark = '<tr class="bad"><td>✘ ' if over else '<tr class="clear"><td>· '
        rows.append(
            f'{mark}{escape(summary.measure)} over its limit</td>'
            f"<td>{escape(summary.unit)}</td>"
            f"{_rate_cells(summary.reported)}"
            f"<td>{_num(limit.limit if limit else None, 'not judged')}</td>"
            f"<td>{_num(limit.baseline_value if limit else None)}</td>"
            f"<td>{_num(summary.candidate_p50)}</td><td>{_num(summary.baseline_p50)}</td></tr>"
        )
    return (f'<section id="agreement"><h2>Agreement</h2>{_rates_plot(report)}'
            f'<table>{head}{"".join(rows)}</table></section>')


def _rates_plot(report: Report) -> str:
    limits = report.thresholds
    rows: list[tuple[str, float, float, float, float | None]] = [
        ("contract breaks", *_interval(report.contract_breaks), limits.max_contract_break_rate),
        ("any difference", *_interval(report.differences), limits.max_difference_rate),
        ("status agreement", *_interval(report.status_agreement), None),
    ]
    rows += [(summary.measure, *_interval(summary.reported), None)
             for summary in report.measures if summary.limit is not None]
    return svg.rates(rows, title=f"share of pairs, {limits.confidence:.0%} CI, red: maximum")


def _interval(found: Rate) -> tuple[float, float, float]:
    return found.value, found.low, found.high


def _latency(report: Report) -> str:
    rows, plots = [], []
    for phase, arms in report.latency.items():
        for arm, found in arms.items():
            rows.append(f"<tr><td>{phase}</td><td>{arm}</td><td>{found.n}</td>"
                        f"<td>{_num(found.p50_s)}</td><td>{_num(found.p95_s)}</td>"
                        f"<td>{_num(found.p95_low_s)} - {_num(found.p95_high_s, 'unbounded')}</td>"
                        f"<td>{_num(found.max_s)}</td></tr>")
        plots.append(svg.ecdf({arm: found.sample_s for arm, found in arms.items()},
                              title=f"{phase} time, share of predictions at or under",
                              unit="seconds"))
    head = ("<tr><th>phase</th><th>arm</th><th>n</th><th>p50 s</th><th>p95 s</th>"
            f"<th>p95 {report.thresholds.confidence:.0%} CI s</th><th>max s</th></tr>")
    return (f'<section id="latency"><h2>Latency</h2><table>{head}{"".join(rows)}</table>'
            f'<div class="plots">{"".join(plots)}</div></section>')


def _cost(report: Report) -> str:
    if report.cost is None:
        return '<section id="cost"><h2>Cost</h2><p>Not reported by both providers.</p></section>'
    cost = report.cost
    return (f'<section id="cost"><h2>Cost</h2><p>Over {cost.n} pairs: control '
            f"${cost.control_mean_usd:.5f}, candidate ${cost.candidate_mean_usd:.5f} per "
            f"prediction (ratio {_num(cost.ratio)}).</p></section>")


def _notes(report: Report) -> str:
    notes = "".join(f"<li>{escape(note)}</li>" for note in report.notes)
    thresholds = escape(report.thresholds.model_dump_json())
    return (f'<section id="notes"><h2>Notes</h2><ul>{notes}</ul>'
            f"<p>Thresholds: <code>{thresholds}</code></p></section>")


def _num(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.4g}"
