"""Unit tests of the report: aggregation, verdict and the three formats (shadow/report.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from shadow import report, verdict
from shadow.compare import ArmFacts, ContractBreak, PairComparison
from shadow.model import Coverage
from shadow.outcome import OutputFile
from shadow.thresholds import Thresholds

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def arm(run_s: float = 2.0, text: str = "", cost: float | None = None, **extra) -> ArmFacts:
    return ArmFacts(status="completed", queue_s=0.5, run_s=run_s, text=text, cost_usd=cost,
                    **extra)


def pair(measures=None, *, breaks=(), control=None, candidate=None, pair_id=None):
    return PairComparison(pair_id=pair_id, control=control or arm(),
                          candidate=candidate or arm(), breaks=tuple(breaks),
                          measures=measures or {"text": 0.01})


BASELINE = [pair({"text": 0.02}) for _ in range(30)]


def test_a_clean_candidate_with_enough_pairs_is_promoted():
    built = report.build("m:v", [pair() for _ in range(200)], BASELINE, now=NOW)
    assert built.verdict.decision == "promote"
    assert built.verdict.line.startswith("PROMOTE m:v: 200 pairs")
    assert built.differences.count == 0 and built.status_agreement.value == 1.0


def test_too_few_pairs_hold_and_say_what_is_missing():
    built = report.build("m", [pair() for _ in range(20)], BASELINE, now=NOW)
    assert built.verdict.decision == "hold"
    assert "20 of the 100 pairs needed" in built.verdict.line


def test_clear_breaches_block_and_breaks_come_first():
    broken = ContractBreak(kind="file_count", path="files", control="1", candidate="2")
    pairs = [pair(breaks=[broken], pair_id=f"b{i}") for i in range(5)]
    pairs += [pair({"text": 0.9}, pair_id="drift")] + [pair() for _ in range(94)]
    built = report.build("m", pairs, BASELINE, now=NOW, worst=3)
    assert built.verdict.decision == "block"
    assert "contract-break rate at least" in built.verdict.line
    assert built.break_kinds == {"file_count": 5}
    assert [m.pair.pair_id for m in built.worst][:3] == ["b0", "b1", "b2"]


def test_latency_and_cost_ratios_are_checked():
    slow = [pair(control=arm(run_s=1.0, cost=0.01), candidate=arm(run_s=3.0, cost=0.03))
            for _ in range(150)]
    built = report.build("m", slow, BASELINE,
                         Thresholds(max_p95_latency_ratio=2.0, max_cost_ratio=1.5), now=NOW)
    assert built.verdict.decision == "block"
    assert "p95 run time 3.00x" in built.verdict.line and "mean cost 3.00x" in built.verdict.line
    assert built.latency["run"]["candidate"].p95_s == 3.0
    assert built.cost is not None and built.cost.ratio == pytest.approx(3.0)


def test_no_baseline_is_said_in_the_notes():
    built = report.build("m", [pair()], [], now=NOW)
    assert any("fewer than the 20 needed" in note for note in built.notes)


def test_latency_samples_are_capped_for_the_plots():
    pairs = [pair(control=arm(run_s=float(i))) for i in range(1000)]
    built = report.build("m", pairs, BASELINE, now=NOW)
    sample = built.latency["run"]["control"].sample_s
    assert len(sample) == report.PLOT_POINTS and sample[0] == 0.0 and sample[-1] == 999.0


def example_report() -> report.Report:
    image = OutputFile(content_type="image/png", size_bytes=10, sha256="a" * 64,
                       url="https://gw.test/a.png")
    odd = pair({"text": 0.5}, pair_id="<odd & id>",
               control=arm(text="line one\nline <two>", files=(image,)),
               candidate=arm(text="line one\nline three", files=(image,)))
    return report.build("m:v", [odd, *(pair() for _ in range(10))], BASELINE, now=NOW)


def test_json_round_trips():
    built = example_report()
    again = report.Report.model_validate_json(report.render(built, "json"))
    assert again == built
    assert json.loads(report.render(built, "json"))["verdict"]["decision"] == "hold"


def test_markdown_has_every_section_and_a_diff():
    text = report.render(example_report(), "md")
    for heading in ("# Shadow report: m:v", "## Contract breaks", "## Agreement",
                    "## Latency", "## Worst mismatches", "```diff"):
        assert heading in text
    assert "-line <two>" in text and "+line three" in text


def test_markdown_diffs_outputs_without_their_file_urls():
    def image(name: str) -> OutputFile:
        return OutputFile(content_type="image/png", size_bytes=10, sha256="a" * 64,
                          url=f"https://gw.test/{name}.png")

    def side(name: str, extra: str = "") -> ArmFacts:
        return arm(files=(image(name),),
                   output_excerpt=f'{{"image": "https://gw.test/{name}.png"{extra}}}')

    same = pair({"image_color": 9.0}, control=side("a"), candidate=side("b"))
    text = report.render(report.build("m", [same], BASELINE, now=NOW), "md")
    assert "```diff" not in text and "https://gw.test/b.png" in text  # listed, not diffed
    other = pair({"number": 0.5}, control=side("a", ', "n": 1'),
                 candidate=side("b", ', "n": 2'))
    text = report.render(report.build("m", [other], BASELINE, now=NOW), "md")
    assert '-{"image": "<file 1>", "n": 1}' in text and '+{"image": "<file 1>", "n": 2}' in text


def test_html_is_offline_escaped_and_ordered():
    page = report.render(example_report(), "html")
    assert "<script" not in page.lower()
    assert "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']https?://(?!gw\.test)""", page)
    assert "&lt;odd &amp; id&gt;" in page and "<odd & id>" not in page
    order = [page.index(f'id="{section}"') for section in
             ("verdict", "contract-breaks", "agreement", "latency", "worst")]
    assert order == sorted(order)
    assert page.count("<svg") == 3 and 'class="wdiff"' in page and "<del" in page
    assert '<img src="https://gw.test/a.png"' in page


def test_html_image_source_callback():
    page = report.render(example_report(), "html",
                         image_src=lambda file, preview: f"/admin/files/{file.sha256[:4]}")
    assert '<img src="/admin/files/aaaa"' in page


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown report format"):
        report.render(example_report(), "pdf")  # type: ignore[arg-type]


def test_markdown_fences_hold_backticks_in_outputs():
    odd = pair({"text": 0.9}, control=arm(text="a ```` b"), candidate=arm(text="c"))
    text = report.render(report.build("m", [odd], BASELINE, now=NOW), "md")
    assert "`````diff" in text


def test_a_p95_that_cannot_be_bounded_holds_and_a_clearly_slower_one_blocks():
    few = [pair(control=arm(run_s=1.0 + i / 100), candidate=arm(run_s=1.0 + i / 100))
           for i in range(60)]
    held = report.build("m", few, BASELINE, Thresholds(min_pairs=50), now=NOW)
    assert held.verdict.decision == "hold"
    assert "p95 run time ratio could be unbounded" in held.verdict.line
    slow = [pair(control=arm(run_s=1.0 + i / 100), candidate=arm(run_s=3.0 + i / 100))
            for i in range(60)]
    unsure = report.build("m", slow, BASELINE, Thresholds(min_pairs=50), now=NOW)
    assert unsure.verdict.decision == "hold", "60 values cannot bound the control's p95"
    assert "not yet certain" in unsure.verdict.line
    assert unsure.latency["run"]["candidate"].p95_high_s is None
    slower = [pair(control=arm(run_s=1.0 + i / 100), candidate=arm(run_s=3.0 + i / 100))
              for i in range(100)]
    blocked = report.build("m", slower, BASELINE, Thresholds(min_pairs=50), now=NOW)
    assert blocked.verdict.decision == "block"
    assert "(at least" in blocked.verdict.line


def test_pairs_whose_control_was_canceled_are_left_out_and_counted():
    canceled = pair({}, control=ArmFacts(status="canceled"), candidate=ArmFacts(status="canceled"))
    built = report.build("m", [canceled, canceled, pair()], BASELINE, now=NOW)
    assert built.pairs == 1
    assert "2 pairs left out: their control prediction was canceled" in built.notes


def test_a_route_without_a_candidate_has_nothing_to_compare():
    built = report.build("m", [], BASELINE, now=NOW, has_candidate=False)
    assert built.verdict.decision == "no-candidate"
    assert built.verdict.line.startswith("NO CANDIDATE m: the route has no candidate provider")
    assert report.Report.model_validate_json(report.render(built, "json")) == built
    assert "NO CANDIDATE" in report.render(built, "md")
    assert "verdict-no-candidate" in report.render(built, "html")


def test_the_verdict_states_its_caveats_before_the_details():
    small = example_report().model_copy(update={
        "baseline_pairs": 3, "coverage": Coverage(shadowed=30, skipped={"policy_size": 10})})
    assert [c.split(":")[0] for c in verdict.caveats(small)] == [
        "baseline too small", "low n", "skipped share"]
    assert "10 of 40 eligible primaries (25.0%)" in verdict.caveats(small)[2]
    built = small.model_copy(update={"verdict": verdict.decide(small)})
    page = report.render(built, "html")
    assert page.index('id="verdict"') < page.index('id="caveats"') < page.index(
        'id="contract-breaks"')
    text = report.render(built, "md")
    assert text.index("Caveat: baseline too small") < text.index("## Contract breaks")


def test_good_and_bad_shares_are_marked_by_class_and_by_text():
    page = report.render(example_report(), "html")
    assert '<tr class="good"><td>✔ status agreement (higher is better)' in page
    assert '<tr class="bad"><td>✘ any reported difference (lower is better)' in page
