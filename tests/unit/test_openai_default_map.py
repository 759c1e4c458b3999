"""The ``openai`` adapter's Replicate-style input mapping is a default map of the maps
mechanism (adapters/openai_mapping.py DEFAULT_MAPS, run by gateway/translation/translator.py): the
bodies it gives, per API, are the table of docs/providers.md "OpenAI-compatible"; a
route's own input map for the provider replaces it (docs/translation.md)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.openai import OpenAIAdapter
from adapters.openai_mapping import DEFAULT_MAPS, build_request
from contracts.job import Job
from gateway.rollout.router import Router
from gateway.rollout.spec import RouteSettings
from gateway.translation import maps
from gateway.translation.maps import MapError
from gateway.translation.translator import Translator, input_of

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("chat", {"prompt": "hi", "max_new_tokens": 9, "temperature": 0.5, "unknown": 1},
     {"max_tokens": 9, "temperature": 0.5, "messages": [{"role": "user", "content": "hi"}]}),
    ("chat", {"prompt": "hi", "system_prompt": "be brief", "image": "https://x/a.png",
              "stop_sequences": "a,,b", "seed": 18446744073709551615},
     {"stop": ["a", "b"], "seed": 18446744073709551615, "messages": [
         {"role": "system", "content": "be brief"},
         {"role": "user", "content": [{"type": "text", "text": "hi"},
                                      {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]},
     ]}),
    ("chat", {"prompt": "hi", "system_prompt": "", "image": ""},
     {"messages": [{"role": "user", "content": "hi"}]}),
    ("completions", {"prompt": "hi", "top_p": 0.9, "stop": ["x"], "presence_penalty": 0},
     {"top_p": 0.9, "stop": ["x"], "presence_penalty": 0, "prompt": "hi"}),
    ("images", {"prompt": "a cat", "width": 512, "height": 256, "size": "1x1",
                "num_outputs": 2, "quality": "hd"},
     {"prompt": "a cat", "response_format": "b64_json", "size": "512x256", "n": 2,
      "quality": "hd"}),
]


@pytest.mark.parametrize(("api", "data", "body"), CASES)
def test_the_default_map_gives_the_documented_body(
    api: str, data: dict[str, Any], body: dict[str, Any]
) -> None:
    assert input_of(DEFAULT_MAPS[api], data, "llm") == body


@pytest.mark.parametrize(("api", "data", "detail"), [
    ("chat", {"system_prompt": "x"}, "input.prompt: a string is required"),
    ("completions", {"prompt": 3}, "input.prompt: a string is required"),
    ("images", {"prompt": "p", "width": "512", "height": 2}, "input.width: an integer is required"),
    ("images", {"prompt": "p", "width": 5, "height": True}, "input.height: an integer is required"),
])
def test_an_input_the_default_map_cannot_take_fails_naming_the_field(
    api: str, data: dict[str, Any], detail: str
) -> None:
    with pytest.raises(MapError) as caught:
        maps.run(DEFAULT_MAPS[api], data, what="the input map of provider 'llm'")
    assert caught.value.detail == f"the input map of provider 'llm' failed: {detail}"


def test_the_adapter_adds_model_and_stream_to_the_mapped_body() -> None:
    assert build_request("m-1", {"prompt": "p"}, stream=True) == {
        "model": "m-1", "prompt": "p", "stream": True}
    assert build_request("m-1", {"prompt": "p"}, stream=False) == {"model": "m-1", "prompt": "p"}


def _job(route: str, provider: str) -> Job:
    return Job.model_validate({
        "id": "j1", "model": "acme/llm", "version": "hidden", "route": route,
        "provider": provider, "input": {}, "state": "creating",
        "created_at": "2026-01-01T00:00:00Z",
    })


def test_a_routes_own_input_map_replaces_the_adapters_default() -> None:
    adapter = OpenAIAdapter(name="llm", api="chat")
    assert adapter.capabilities.input_map == DEFAULT_MAPS["chat"]
    routes = [
        RouteSettings(model="acme/llm", provider="llm"),
        RouteSettings(model="acme/own", provider="llm",
                      maps={"llm": {"input": "{messages: [{role: \"user\", content: .q}]}"}}),
    ]
    router = Router(routes)
    translator = Translator(lambda key: router.spec(key).maps,
                            {"llm": adapter.capabilities.input_map})
    default = translator.input(_job("acme/llm", "llm"), "llm", {"prompt": "hi"})
    assert default == {"messages": [{"role": "user", "content": "hi"}]}
    own = translator.input(_job("acme/own", "llm"), "llm", {"q": "yo"})
    assert own == {"messages": [{"role": "user", "content": "yo"}]}
