"""The presets of examples/maps/ (docs/translation.md, "Presets"): each compiles, turns its
example's app input into the request it shows and the provider's output into what the
app sees, and keeps an app's ``false`` (jq's ``//`` takes ``false`` as missing: no preset
reads a boolean that way)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.translation import maps
from gateway.translation.maps import MapSpec
from gateway.translation.translator import input_of

PRESETS = Path(__file__).parents[2] / "examples" / "maps"
NAMES = sorted(p.name for p in PRESETS.glob("*.toml"))


def load(name: str) -> tuple[MapSpec, dict[str, Any]]:
    data = tomllib.loads((PRESETS / name).read_text())
    example = {k: json.loads(v) for k, v in data.pop("example").items()}
    return MapSpec.model_validate(data), example


def request_of(spec: MapSpec, data: dict[str, Any]) -> Any:
    return data if spec.input is None else input_of(spec.input, data, "p")


def test_the_three_presets_the_docs_name_are_there() -> None:
    assert NAMES == ["fal-text-to-image.toml", "runpod-wrapped-result.toml",
                     "whisper-openai.toml"]


@pytest.mark.parametrize("name", NAMES)
def test_a_preset_compiles_and_does_what_its_example_shows(name: str) -> None:
    spec, example = load(name)
    assert maps.map_problems({"p": spec}) == []
    assert request_of(spec, example["input"]) == example["request"]
    assert spec.output is not None
    assert maps.run(spec.output, example["provider_output"], what="output") == example["output"]


@pytest.mark.parametrize("name", NAMES)
def test_no_preset_reads_a_field_with_the_alternative_operator(name: str) -> None:
    spec, _ = load(name)
    for program in (spec.input or "", spec.output or ""):
        assert not re.search(r"\.[A-Za-z_]\w*\s*//", program), program


@pytest.mark.parametrize(("name", "data", "path", "expected"), [
    ("fal-text-to-image.toml", {"prompt": "p", "sync_mode": False}, "sync_mode", False),
    ("fal-text-to-image.toml", {"prompt": "p", "disable_safety_checker": False},
     "enable_safety_checker", True),
    ("fal-text-to-image.toml", {"prompt": "p", "disable_safety_checker": True},
     "enable_safety_checker", False),
    ("runpod-wrapped-result.toml", {"prompt": "p", "refine": False}, "refine", False),
])
def test_an_apps_false_survives_every_preset(
    name: str, data: dict[str, Any], path: str, expected: bool
) -> None:
    spec, _ = load(name)
    assert request_of(spec, data)[path] is expected


@pytest.mark.parametrize(("translate", "starts"), [(False, "Transcribe"), (True, "Translate"),
                                                   (None, "Transcribe")])
def test_whispers_translate_false_stays_transcribe(translate: bool | None, starts: str) -> None:
    spec, _ = load("whisper-openai.toml")
    data: dict[str, Any] = {"audio": "https://x/a.wav"}
    if translate is not None:
        data["translate"] = translate
    text = request_of(spec, data)["messages"][0]["content"][1]["text"]
    assert text.startswith(starts)


def test_the_pitfall_is_real_and_found() -> None:
    assert maps.run(".flag // true", {"flag": False}, what="m") is True  # jq's own reading
    assert maps.falls_back_on_false(".flag // true", {"flag"}) == ["flag"]
    assert maps.run('if has("flag") then .flag else true end', {"flag": False}, what="m") is False


#: The Whisper preset's output map as first written: ``join("")`` alone (the preset joins
#: with ``add`` where that gives a string, for speed: the two must agree).
WHISPER_OUTPUT_BY_JOIN = """
(if type == "array" then join("") else tostring end) as $text
| {transcription: $text, segments: [], translation: null, txt_file: null, srt_file: null,
   detected_language: null}
"""


def _result_or_error(program: str, value: Any) -> Any:
    try:
        return maps.run(program, value, what="output")
    except maps.MapError as exc:
        return ("error", exc.detail)


@given(st.lists(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6)
                | st.floats(allow_nan=False, allow_infinity=False, width=32)
                | st.just({"error": "boom"}) | st.just(["x"]), max_size=6)
       | st.text(max_size=6) | st.integers() | st.none() | st.just({"a": 1}))
def test_the_whisper_output_map_joins_as_join_does(value: Any) -> None:
    spec, _ = load("whisper-openai.toml")
    assert spec.output is not None
    assert _result_or_error(spec.output, value) == _result_or_error(WHISPER_OUTPUT_BY_JOIN,
                                                                    value)
