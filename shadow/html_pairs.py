"""The worst pairs of the HTML report (docs/shadow.md, "The report"): per pair what was
found, both arms side by side (files as thumbnails with links, the output excerpt), the
image difference heat maps with their values, and a word-level diff of the texts.

Plain HTML, no script: long text is folded in ``<details>``; additions and removals are
marked by colour and by ``<ins>`` / ``<del>`` (and their ``+`` / ``-`` prefixes), so they
read without colour too.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from html import escape

from shadow.compare import ArmFacts, PairComparison
from shadow.heatmap import HeatMap
from shadow.inputs import input_links
from shadow.model import Mismatch, Report
from shadow.outcome import OutputFile

__all__ = ["FOLD_CHARS", "MAX_DIFF_WORDS", "STYLE", "worst_section"]

ImageSource = Callable[[OutputFile, str | None], str | None]

FOLD_CHARS = 600
"""Text longer than this is shown folded: its start, then all of it in ``<details>``."""

MAX_DIFF_WORDS = 5_000
"""Words of each text the word diff compares at most."""

STYLE = """
.heat figure { display: inline-block; margin: 4px; } .heat img { max-width: 512px; }
.wdiff { font-family: monospace; font-size: 12px; white-space: pre-wrap; background: #f6f6f6;
  padding: 6px; } .wdiff ins { background: #b7f0b1; text-decoration: underline; }
.wdiff del { background: #ffc4c0; text-decoration: line-through; }
"""


def worst_section(report: Report, source: ImageSource) -> str:
    """The ``<section id="worst">`` of the page."""
    if not report.worst:
        return '<section id="worst"><h2>Worst mismatches</h2><p>None reported.</p></section>'
    items = [_mismatch(index, mismatch, source)
             for index, mismatch in enumerate(report.worst, start=1)]
    return f'<section id="worst"><h2>Worst mismatches</h2>{"".join(items)}</section>'


def _mismatch(index: int, mismatch: Mismatch, source: ImageSource) -> str:
    judgement, pair = mismatch.judgement, mismatch.pair
    lines = [f"<li><b>contract break</b> {escape(b.kind)} at <code>{escape(b.path)}</code>: "
             f"{escape(b.control)} vs {escape(b.candidate)}</li>" for b in judgement.breaks]
    lines += [f"<li>{escape(f.measure)} {f.value:.4g} over its limit {f.limit:.4g}</li>"
              for f in judgement.findings]
    measured = ", ".join(f"{escape(name)} {value:.4g}"
                         for name, value in sorted(pair.measures.items()))
    return (
        f'<div class="mismatch" id="mismatch-{index}"><h3>{index}. pair '
        f"{escape(pair.pair_id or '(no id)')}</h3><ul>{''.join(lines)}</ul>"
        f"<p>measures: {measured or 'none'}</p>{_input(pair)}"
        f'<div class="sides">{_side("control", pair.control, source)}'
        f"{_side('candidate', pair.candidate, source)}</div>"
        f"{_heat_maps(pair)}{_text_diff(pair)}</div>"
    )


def _input(pair: PairComparison) -> str:
    if not pair.input_excerpt:
        return ""
    links = "".join(f'<li><a href="{escape(url)}">{escape(url)}</a></li>'
                    for url in input_links(pair.input_excerpt))
    return (f'<div class="input"><h4>Input</h4>{_folded(pair.input_excerpt, pre=True)}'
            + (f"<ul>{links}</ul>" if links else "") + "</div>")


def _side(name: str, facts: ArmFacts, source: ImageSource) -> str:
    parts = [f'<div class="side side-{name}"><h4>{name}</h4>',
             f"<p>status {escape(facts.status.value)}, queue {_num(facts.queue_s)} s, "
             f"run {_num(facts.run_s)} s</p>"]
    if facts.error:
        parts.append(f"<p>error ({escape(facts.error_class)}): {_folded(facts.error)}</p>")
    for position, file in enumerate(facts.files):
        preview = facts.previews[position] if position < len(facts.previews) else None
        src = source(file, preview) if file.media_type.startswith("image/") else None
        label = f"{file.media_type}, {file.size_bytes} bytes, sha256 {file.sha256[:12]}"
        if src:
            parts.append(f'<img src="{escape(src)}" alt="{escape(name)} file {position}" '
                         f'title="{escape(label)}">')
        name_of = f"files[{position}]"
        if file.url and file.url.startswith(("http://", "https://")):
            name_of = f'<a href="{escape(file.url)}">{name_of}</a>'
        parts.append(f"<p>{name_of}: {escape(label)}</p>")
    parts.append(f"<pre>{escape(facts.output_excerpt)}</pre></div>")
    return "".join(parts)


def _heat_maps(pair: PairComparison) -> str:
    figures = [_figure(position, found) for position, found in enumerate(pair.heatmaps)
               if found is not None]
    if not figures:
        return ""
    return f'<div class="heat"><h4>Image difference</h4>{"".join(figures)}</div>'


def _figure(position: int, found: HeatMap) -> str:
    caption = (f"files[{position}]: per-pixel difference, black = same, yellow = most; "
               f"largest {found.max_levels} levels, mean {found.mean_levels:.2f} levels "
               f"(shown x{found.gain:.3g})")
    return (f'<figure><img src="{escape(found.data_uri)}" alt="{escape(caption)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def _text_diff(pair: PairComparison) -> str:
    a, b = pair.control.text, pair.candidate.text
    if a == b:
        return ""
    words_a, words_b = a.split()[:MAX_DIFF_WORDS], b.split()[:MAX_DIFF_WORDS]
    parts = []
    matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            parts.append(escape(" ".join(words_a[i1:i2])))
            continue
        if i2 > i1:
            parts.append(f'<del title="control only">-{escape(" ".join(words_a[i1:i2]))}</del>')
        if j2 > j1:
            parts.append(f'<ins title="candidate only">+{escape(" ".join(words_b[j1:j2]))}</ins>')
    return ('<h4>Text (word diff: <del>-control only</del> <ins>+candidate only</ins>)</h4>'
            f'<div class="wdiff">{" ".join(parts)}</div>')


def _folded(text: str, *, pre: bool = False) -> str:
    start, end = ("<pre>", "</pre>") if pre else ("", "")
    if len(text) <= FOLD_CHARS:
        return f"{start}{escape(text)}{end}"
    return (f"{start}{escape(text[:FOLD_CHARS])}…{end} <details><summary>all {len(text)} "
            f"characters</summary><pre>{escape(text)}</pre></details>")


def _num(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.4g}"
