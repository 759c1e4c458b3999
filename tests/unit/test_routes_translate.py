"""``cutover routes translate`` (gateway/translation/dryrun.py): the request a provider
would get and the output the app would see, with the schema checks, calling nobody (the providers'
addresses here listen nowhere; the request is captured from the real adapter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway import cli

CONFIG = """
[gateway]
database_url = "sqlite+aiosqlite:///{tmp}/cutover.db"
storage_url = "file://{tmp}/assets"
public_url = "https://gw.example"

[providers.cog]
kind = "cog"
base_url = "http://127.0.0.1:9"

[providers.fal]
kind = "fal"
base_url = "http://127.0.0.1:9"

[[routes]]
model = "acme/sdxl"
provider = "cog"
candidate = "fal"
candidate_target = "fal-ai/fast-sdxl"
[routes.openapi_schema.components.schemas.Input]
type = "object"
properties.prompt.type = "string"
properties.seed.type = "integer"
properties.width.type = "integer"
[routes.openapi_schema.components.schemas.Output]
type = "array"
items = {{ type = "string", format = "uri" }}
[routes.maps.fal]
input = '{{prompt, seed, image_size: {{width}}}}'
output = '[.images[].url]'
"""


def translate(tmp_path: Path, *args: str) -> int:
    config = tmp_path / "cutover.toml"
    config.write_text(CONFIG.format(tmp=tmp_path))
    return cli.main(["routes", "translate", "acme/sdxl", "--config", str(config), *args])


def sections(out: str) -> dict[str, str]:
    parts = [p for p in out.split("== ") if p.strip()]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1].strip() for p in parts}


def test_translate_prints_the_fal_request_and_what_the_app_sees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app_input = {"prompt": "a cat", "seed": 18446744073709551615, "width": 512}
    fal_output = {"images": [{"url": "https://v3.fal.media/a.png"}], "seed": 1}
    assert translate(tmp_path, "--provider", "fal", "--input", json.dumps(app_input),
                     "--output", json.dumps(fal_output)) == 0
    shown = sections(capsys.readouterr().out)
    assert shown["input schema"] == "valid"
    request = json.loads(shown["request fal (fal) would get"])
    assert request["method"] == "POST"
    assert request["url"].startswith("http://127.0.0.1:9/fal-ai/fast-sdxl?fal_webhook=https")
    assert request["headers"]["authorization"] == "<hidden>"
    assert request["json"] == {"prompt": "a cat", "seed": 18446744073709551615,
                               "image_size": {"width": 512}}
    assert json.loads(shown["output schema, what the app would see"]) == [
        "https://v3.fal.media/a.png"]


def test_translate_drops_an_undeclared_input_as_a_create_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert translate(tmp_path, "--provider", "cog", "--input",
                     '{"prompt": "x", "stream": true}') == 0
    shown = sections(capsys.readouterr().out)
    assert shown["input schema"] == "valid; dropped, as the model does not declare them: stream"
    assert json.loads(shown["request cog (cog) would get"])["json"]["input"] == {"prompt": "x"}


def test_translate_on_the_control_without_maps_shows_cogs_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert translate(tmp_path, "--provider", "cog", "--input", '{"prompt": "x"}') == 0
    shown = sections(capsys.readouterr().out)
    assert "input map (none: the input is passed as it is)" in shown
    request = json.loads(shown["request cog (cog) would get"])
    assert (request["method"], request["json"]["input"]) == ("PUT", {"prompt": "x"})


@pytest.mark.parametrize(("args", "failed"), [
    (["--input", '{"prompt": 3}'], "FAILED: input.prompt: 3 is not of type 'string'"),
    (["--input", '{"prompt": "x"}', "--output", '{"images": 3}'],
     "FAILED: the output map of provider 'fal' failed: Cannot iterate over number (3)"),
    (["--input", '{"prompt": "x"}', "--output", '{"images": [{"url": 3}]}'],
     "FAILED: output[0] is an integer where the model declares one URI"),
])
def test_translate_names_the_failing_check_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], failed: str
) -> None:
    assert translate(tmp_path, "--provider", "fal", *args) == 1
    assert failed in capsys.readouterr().out


def test_translate_refuses_a_provider_that_is_not_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert translate(tmp_path, "--provider", "nope", "--input", "{}") == 1
    assert "provider 'nope' is not configured" in capsys.readouterr().err
