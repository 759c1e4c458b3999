"""The JSON report carries no server file-system path (docs/shadow.md, "The report"):
an output file read from local storage is shown by its URL and digest, never its path."""

from __future__ import annotations

from pathlib import Path

from shadow import report
from shadow.compare import ArmFacts, PairComparison
from shadow.outcome import OutputFile
from tests.unit.test_shadow_report import BASELINE, NOW, arm


def test_the_json_report_names_no_server_path(tmp_path: Path) -> None:
    stored = tmp_path / "assets" / "job1" / "out.png"
    image = OutputFile(content_type="image/png", size_bytes=10, sha256="a" * 64,
                       url="https://gw.test/a.png", path=stored, key="job1/out.png")
    facts: ArmFacts = arm(text="x", files=(image,))
    odd = PairComparison(pair_id="p", control=facts, candidate=arm(text="y", files=(image,)),
                         measures={"text": 0.5})
    built = report.build("m", [odd, *BASELINE[:5]], BASELINE, now=NOW)
    assert built.worst and built.worst[0].pair.control.files[0].path == stored
    text = report.render(built, "json")
    assert str(tmp_path) not in text and '"path"' not in text
    assert "https://gw.test/a.png" in text
    kept = odd.model_dump(mode="json")["control"]["files"][0]  # the stored comparison's
    assert kept["path"] == str(stored)  # previews of a stored pair still read the file


def test_the_coverage_line_lists_skips_by_reason() -> None:
    coverage = report.Coverage(shadowed=5, skipped={"budget": 1, "policy_size": 3})
    assert coverage.line == "5 shadowed, 4 skipped: 1 budget, 3 policy_size"
    assert report.Coverage(shadowed=2, skipped={}).line == "2 shadowed, 0 skipped"
