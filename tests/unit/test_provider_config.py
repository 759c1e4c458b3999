"""Provider configuration: kinds, ``token_env`` credentials, routes' ``target``, and the
adapter factory (docs/providers.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.cog_held import HeldCogAdapter
from adapters.fal import FalAdapter
from adapters.openai import OpenAIAdapter
from adapters.replicate import ReplicateAdapter
from adapters.runpod import RunPodAdapter
from contracts.errors import ConfigurationError
from gateway import cli, providers
from gateway.config import Settings, load_settings

CONFIG = """
[gateway]
api_tokens = ["r8_x"]

[providers.fal]
kind = "fal"
token_env = "IT_FAL_KEY"

[providers.rp]
kind = "runpod"
token_env = "IT_RUNPOD_KEY"
rate_limit_per_s = 5

[providers.llm]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
api = "completions"

[providers.r8]
kind = "replicate"
token_env = "IT_R8_TOKEN"

[[routes]]
model = "acme/sdxl"
provider = "fal"
target = "fal-ai/fast-sdxl"
candidate = "rp"
candidate_target = "ep-123"
canary_percent = 10
"""


def settings(tmp_path: Path, text: str = CONFIG) -> Settings:
    path = tmp_path / "cutover.toml"
    path.write_text(text)
    return load_settings(path)


def test_every_kind_parses_and_builds_its_adapter(tmp_path: Path):
    made = settings(tmp_path)
    env = {"IT_FAL_KEY": "k", "IT_RUNPOD_KEY": "k", "IT_R8_TOKEN": "k"}
    kinds = {
        name: type(providers.build_adapter(
            name, conf.kind, token=providers.credential(conf.token_env, env),
            **conf.adapter_options(),
        ))
        for name, conf in made.providers.items()
    }
    assert kinds == {"fal": FalAdapter, "rp": RunPodAdapter, "llm": OpenAIAdapter,
                     "r8": ReplicateAdapter}
    assert made.routes[0].target == "fal-ai/fast-sdxl"
    assert made.routes[0].candidate_target == "ep-123"


def test_check_names_every_missing_credential(tmp_path: Path, monkeypatch, capsys):
    path = tmp_path / "cutover.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("IT_FAL_KEY", "set")
    monkeypatch.delenv("IT_RUNPOD_KEY", raising=False)
    monkeypatch.setenv("IT_R8_TOKEN", "")
    assert cli.main(["check", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "$IT_RUNPOD_KEY" in err and "$IT_R8_TOKEN" in err and "IT_FAL_KEY" not in err


def test_a_credential_in_the_file_is_refused(tmp_path: Path):
    text = CONFIG.replace('token_env = "IT_FAL_KEY"', 'token = "fal-secret"')
    with pytest.raises(ConfigurationError, match=r"providers\.fal\.token"):
        settings(tmp_path, text)


@pytest.mark.parametrize("bad", ['token_env = "FAL KEY"', 'base_url = "queue.fal.run"'])
def test_bad_provider_values_are_refused(tmp_path: Path, bad: str):
    with pytest.raises(ConfigurationError):
        settings(tmp_path, CONFIG.replace('token_env = "IT_FAL_KEY"', bad))


def test_default_file_hosts_cover_each_providers_cdn(tmp_path: Path):
    made = settings(tmp_path).providers
    hosts = {n: providers.file_hosts(p.kind, p.base_url, p.file_hosts) for n, p in made.items()}
    assert "*.fal.media" in hosts["fal"]
    assert "replicate.delivery" in hosts["r8"]
    assert hosts["rp"] == []


def test_held_builds_the_held_cog_adapter_and_is_refused_for_other_kinds(tmp_path: Path):
    text = CONFIG + '\n[providers.cog]\nkind = "cog"\nbase_url = "http://127.0.0.1:5000"\n' \
        'held = true\n'
    conf = settings(tmp_path, text).providers["cog"]
    adapter = providers.build_adapter("cog", conf.kind, **conf.adapter_options())
    assert isinstance(adapter, HeldCogAdapter)
    assert adapter.capabilities.webhooks is False
    with pytest.raises(ConfigurationError, match="held = true applies to cog providers only"):
        settings(tmp_path, CONFIG.replace('token_env = "IT_FAL_KEY"',
                                          'token_env = "IT_FAL_KEY"\nheld = true'))
