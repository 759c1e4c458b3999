"""gateway/translation/maps.py: jq programs compiled once, run with exactly one result, integers
beyond 2^53 kept exactly, and a program that does not compile refused by ``cutover
check`` and ``serve`` naming the route and jq's message (docs/translation.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import cli
from gateway.translation import maps
from gateway.translation.maps import MapError

BIG = 18446744073709551615

CONFIG = """
[gateway]
listen = "127.0.0.1:0"
api_tokens = ["r8_test"]
database_url = "sqlite+aiosqlite:///{tmp}/cutover.db"
storage_url = "file://{tmp}/assets"

[providers.cog]
kind = "cog"
base_url = "http://127.0.0.1:5000"

[providers.fal]
kind = "fal"

[[routes]]
model = "acme/sdxl"
provider = "cog"
candidate = "fal"
[routes.maps.fal]
input = '{{prompt, image_size: {{width, height}}'
output = '[.images[].url]'
"""


def test_jq_alone_rounds_a_seed_beyond_2_53_and_the_map_does_not() -> None:
    assert maps.compiled(".").input_value(BIG).first() != BIG  # the pitfall itself
    assert maps.run(".", BIG, what="m") == BIG
    assert maps.run("{seed, s: .seed}", {"seed": BIG}, what="m") == {"seed": BIG, "s": BIG}
    assert maps.run("[.[] | .]", [-BIG, 2**53, 2**53 + 1], what="m") == [-BIG, 2**53, 2**53 + 1]


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False, width=32),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=4),
    max_leaves=12,
))
def test_the_identity_map_gives_back_every_json_value_exactly(value: object) -> None:
    assert maps.run(".", value, what="m") == value


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=4),
    max_leaves=12,
)


def _beyond_2_53(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) > 2**53
    if isinstance(value, dict):
        return any(map(_beyond_2_53, value.values()))
    return isinstance(value, list) and any(map(_beyond_2_53, value))


@given(JSON, st.sampled_from([".", "[.]", "{v: ., t: type}", "[.. | numbers]",
                              "[paths(type == \"number\")]", "tojson"]))
def test_a_map_gives_what_jq_gives_and_integers_beyond_2_53_exactly(
    value: object, program: str,
) -> None:
    # run() hands jq JSON text and skips the marked-integer walk when the text has no run
    # of 16 digits; it must agree with jq's own input_value wherever jq is exact
    expected = maps.compiled(program).input_value(value).first()
    if not _beyond_2_53(value):
        assert maps.run(program, value, what="m") == expected
    elif program in (".", "[.]"):
        assert maps.run(program, value, what="m") == (value if program == "." else [value])


@pytest.mark.parametrize("value", [
    {"seed": 2**53, "n": -(2**53), "s": "12345678901234567890", "f": 1234567890123456.5},
    [2**53 + 1, "9007199254740993", 1e300],  # the smallest beyond 2^53: 16 digits
    {"k": [-(2**53) - 1, 1.5]},
    [2**64, -(2**64) - 1, "\ue000 is only a mark in jq"],
])
def test_long_numbers_and_digits_in_strings_keep_their_values(value: object) -> None:
    assert maps.run(".", value, what="m") == value
    assert maps.run("[.]", value, what="m") == [value]


def test_arithmetic_on_an_integer_beyond_2_53_fails_rather_than_rounding() -> None:
    with pytest.raises(MapError, match="cannot be added"):
        maps.run(".seed + 1", {"seed": BIG}, what="m")


def test_a_program_is_compiled_once_per_text() -> None:
    text = '{a: .b, marker: "compiled-once"}'
    assert maps.compiled(text) is maps.compiled(text)


@pytest.mark.parametrize(("program", "detail"), [
    ("empty", "m gave no value (a map must give exactly one)"),
    (".[]", "m gave more than one value (a map must give exactly one; wrap a stream in [...])"),
    ('error("no prompt\\ngiven")', "m failed: no prompt / given"),
])
def test_a_run_time_failure_is_one_line(program: str, detail: str) -> None:
    with pytest.raises(MapError) as caught:
        maps.run(program, [1, 2], what="m")
    assert caught.value.detail == detail


def test_check_and_serve_refuse_a_map_that_does_not_compile_naming_route_and_jq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "cutover.toml"
    config.write_text(CONFIG.format(tmp=tmp_path))
    assert cli.main(["check", "--config", str(config)]) == 2  # a configuration error
    err = capsys.readouterr().err
    assert "route acme/sdxl: maps.fal.input does not compile: jq: error: syntax error" in err
    assert "maps.fal.output" not in err  # the output map compiles
    assert cli.main(["serve", "--config", str(config)]) == 2
    assert "route acme/sdxl: maps.fal.input does not compile" in capsys.readouterr().err


def test_check_refuses_maps_for_a_provider_that_is_not_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "cutover.toml"
    text = CONFIG.format(tmp=tmp_path).replace("[routes.maps.fal]", "[routes.maps.runpod]")
    config.write_text(text.replace("'{prompt, image_size: {width, height}'", "'.'"))
    assert cli.main(["check", "--config", str(config)]) == 2  # a configuration error
    assert "names unknown provider 'runpod'" in capsys.readouterr().err


def test_routes_show_prints_the_routes_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "cutover.toml"
    config.write_text(CONFIG.format(tmp=tmp_path).replace(
        "'{prompt, image_size: {width, height}'", "'{prompt}'"))
    assert cli.main(["routes", "show", "acme/sdxl", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "maps        fal input: {prompt}\nmaps        fal output: [.images[].url]\n" in out
    assert cli.main(["routes", "show", "acme/sdxl", "--json", "--config", str(config)]) == 0
    assert '"maps": {\n      "fal": {\n        "input": "{prompt}"' in capsys.readouterr().out


def test_an_input_maps_top_level_nulls_are_not_sent() -> None:
    from gateway.translation.translator import input_of

    mapped = input_of("{prompt, seed, size: {width}}", {"prompt": "p"}, "fal")
    assert mapped == {"prompt": "p", "size": {"width": None}}  # only the top level


def test_a_route_without_maps_is_stored_as_before_so_its_seed_digest_is_unchanged() -> None:
    from gateway.rollout.spec import RouteSpec
    from gateway.store.routes import config_hash

    plain = RouteSpec(provider="cog")
    assert "maps" not in plain.stored()
    # the stored form before maps existed: every other field, caller_key as text
    earlier = {**plain.model_dump(mode="json", exclude={"caller_key", "maps", "guard_paused"}),
               "caller_key": "token"}
    text = json.dumps(earlier, sort_keys=True, separators=(",", ":"))
    assert config_hash(plain) == hashlib.sha256(text.encode()).hexdigest()
    mapped = RouteSpec(provider="cog", maps={"fal": {"output": "."}})
    assert mapped.stored()["maps"] == {"fal": {"input": None, "output": "."}}
    assert RouteSpec.model_validate(mapped.stored()) == mapped


def test_routes_set_map_changes_the_maps_live_and_audited_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "cutover.toml"
    config.write_text(CONFIG.format(tmp=tmp_path).replace(
        "'{prompt, image_size: {width, height}'", "'{prompt}'"))
    base = ["routes", "set-map", "acme/sdxl", "--config", str(config), "--provider", "fal"]
    assert cli.main([*base, "--input", "{prompt, seed}", "--reason", "seed too"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("acme/sdxl: maps ") and "(change #2 by cli: seed too)" in out
    assert cli.main([*base, "--input", "{prompt", "--reason", "typo"]) == 1
    assert "route 'acme/sdxl': maps.fal.input does not compile" in capsys.readouterr().err
    assert cli.main(["routes", "show", "acme/sdxl", "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "maps        fal input: {prompt, seed}\n" in shown  # the typo changed nothing
    assert "maps        fal output" not in shown  # set-map sets both sides
    assert "cli set-map: maps" in shown and "reason: seed too" in shown
    assert cli.main([*base, "--reason", "fal takes them as they are"]) == 0
    capsys.readouterr()
    assert cli.main(["routes", "show", "acme/sdxl", "--config", str(config)]) == 0
    assert "maps        none" in capsys.readouterr().out
