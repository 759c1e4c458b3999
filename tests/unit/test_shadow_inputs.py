"""What a report shows of a pair's input (docs/shadow.md, "The report")."""

from __future__ import annotations

from shadow.inputs import INPUT_CHARS, input_excerpt, input_links


def test_a_data_uri_is_shown_by_its_type_and_size_not_copied() -> None:
    image = "data:image/png;base64," + "A" * 3_000_000
    shown = input_excerpt({"prompt": "a fox", "images": [image]})
    assert "<image/png data: URI, 3000022 characters>" in shown
    assert len(shown) < 200 and '"prompt": "a fox"' in shown


def test_long_inputs_are_cut_and_urls_listed_once_in_order() -> None:
    shown = input_excerpt({"prompt": "x" * 10_000})
    assert len(shown) == INPUT_CHARS and shown.endswith("…")
    links = input_excerpt({"a": "https://f.test/1.png", "b": ["http://f.test/2", "https://f.test/1.png"]})
    assert input_links(links) == ("https://f.test/1.png", "http://f.test/2")
    assert input_excerpt(None) == ""


def test_the_markdown_report_shows_a_worst_pairs_input() -> None:
    from shadow import report
    from tests.unit.test_shadow_report import example_report

    built = example_report()
    first = built.worst[0]
    pair = first.pair.model_copy(update={"input_excerpt": input_excerpt({"prompt": "a fox"})})
    shown = built.model_copy(update={"worst": (first.model_copy(update={"pair": pair}),)})
    text = report.render(shown, "md")
    assert '```json\n{\n "prompt": "a fox"\n}\n```' in text
