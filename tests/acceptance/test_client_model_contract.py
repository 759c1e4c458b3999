"""The unmodified ``replicate`` clients (Python, and JS through tests/support/node.py) get
the model's contract through cutover, not the provider's: schemas read from the provider,
undeclared inputs dropped as Cog drops them, and outputs in the route's declared shape
(docs/translation.md, "Schemas, inputs and output conformance").

One gateway subprocess (HTTPS, SQLite) in front of the real Cog server (with a built
schema, no ``openapi_schema`` on its route) and the fake OpenAI (chat and images), RunPod
and fal servers.
"""

from __future__ import annotations

import json
import shutil
import ssl
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import replicate
from replicate.exceptions import ReplicateError
from replicate.helpers import FileOutput

from tests.acceptance.test_client_per_provider import BackgroundLoop, _start
from tests.support.cog_server import CogServer
from tests.support.fixtures import COG_WEBHOOK_TOKEN, ECHO_MODEL_DIR, ECHO_OPENAPI_SCHEMA
from tests.support.live import ECHO_VERSION, LIVE_TOKEN
from tests.support.node import run_js
from tests.support.tls import ServerTLS
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod

POLL = {"fetch_interval_s": 0.2, "fetch_max_interval_s": 1.0}
LLM_VERSION = "1" * 64
IMAGE_VERSION = "2" * 64
TEXT_VERSION = "3" * 64
PICTURES_VERSION = "4" * 64


def declared(output: dict[str, Any]) -> dict[str, Any]:
    return {"openapi": "3.0.2", "info": {"title": "Cog", "version": "0.1.0"}, "paths": {},
            "components": {"schemas": {
                "Input": {"type": "object", "required": ["prompt"], "properties": {
                    "prompt": {"type": "string"}, "output_kind": {"type": "string"}}},
                "Output": output}}}


@dataclass
class Stack:
    url: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tls: ServerTLS) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("model-contract")
    model_dir = workdir / "echo-with-schema"
    model_dir.mkdir()
    shutil.copy(ECHO_MODEL_DIR / "predict.py", model_dir / "predict.py")
    (model_dir / ".cog").mkdir()
    (model_dir / ".cog" / "openapi_schema.json").write_text(json.dumps(ECHO_OPENAPI_SCHEMA))
    with ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        cog = stack.enter_context(CogServer(model_dir, env={
            "WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN, "SSL_CERT_FILE": str(tls.ca_file)}))
        loop = BackgroundLoop()
        stack.callback(loop.close)
        servers = {"openai": FakeOpenAI(token=OPENAI_TOKEN),
                   "runpod": FakeRunPod(auto=True, token=RUNPOD_TOKEN),
                   "fal": FakeFal(auto=True, token=FAL_TOKEN)}
        for server in servers.values():
            server.ssl_context = ssl.create_default_context(cafile=str(tls.ca_file))
            loop.run(server.__aenter__())
            stack.callback(lambda s=server: loop.run(s.__aexit__(None, None, None)))
        for name, key in (("IT_OPENAI_KEY", OPENAI_TOKEN), ("IT_RUNPOD_KEY", RUNPOD_TOKEN),
                          ("IT_FAL_KEY", FAL_TOKEN)):
            env.setenv(name, key)
        providers = {
            "cog": {"kind": "cog", "base_url": cog.url, "webhook_auth_token": COG_WEBHOOK_TOKEN},
            "llm": {"kind": "openai", "base_url": f"{servers['openai'].url}/v1",
                    "token_env": "IT_OPENAI_KEY", **POLL},
            "pictures": {"kind": "openai", "api": "images",
                         "base_url": f"{servers['openai'].url}/v1", "token_env": "IT_OPENAI_KEY",
                         **POLL},
            "runpod": {"kind": "runpod", "base_url": f"{servers['runpod'].url}/v2",
                       "token_env": "IT_RUNPOD_KEY", **POLL},
            "fal": {"kind": "fal", "base_url": servers["fal"].url, "token_env": "IT_FAL_KEY",
                    "file_hosts": ["127.0.0.1"], **POLL},
        }
        routes = [
            {"model": "acme/echo", "version": ECHO_VERSION, "provider": "cog"},
            {"model": "acme/llm", "version": LLM_VERSION, "provider": "llm", "target": "echo-1"},
            {"model": "acme/chat", "provider": "llm", "target": "echo-1"},
            {"model": "acme/pictures", "version": PICTURES_VERSION, "provider": "pictures",
             "target": "img-1"},
            {"model": "acme/image", "version": IMAGE_VERSION, "provider": "runpod",
             "target": "ep-echo", "openapi_schema": declared({"type": "string",
                                                              "format": "uri"})},
            {"model": "acme/text", "version": TEXT_VERSION, "provider": "fal",
             "target": "fal-ai/echo", "openapi_schema": declared({"type": "string"})},
        ]
        yield Stack(_start(stack, workdir, tls, providers, routes))


@pytest.fixture
def client(stack: Stack) -> Iterator[replicate.Client]:
    made = replicate.Client(api_token=LIVE_TOKEN, base_url=stack.url)
    yield made
    http = made._Client__client  # type: ignore[attr-defined]
    if http is not None:
        http.close()


def test_cog_schema_is_read_from_the_provider(client: replicate.Client) -> None:
    version = client.models.get("acme/echo").versions.get(ECHO_VERSION)
    assert version.openapi_schema == ECHO_OPENAPI_SCHEMA


def test_undeclared_inputs_run_on_real_cog_and_are_named_in_the_logs(
    client: replicate.Client,
) -> None:
    prediction = client.predictions.create(
        version=ECHO_VERSION, input={"prompt": "hi", "stream": True, "max_length": 64})
    prediction.wait()
    assert (prediction.status, prediction.output) == ("succeeded", "HI")
    assert prediction.logs.startswith("Stripped unknown input fields: max_length, stream\n")


def test_a_wrong_type_is_still_a_422_naming_the_field(client: replicate.Client) -> None:
    with pytest.raises(ReplicateError) as caught:
        client.run(f"acme/echo:{ECHO_VERSION}", input={"prompt": 3, "stream": True})
    assert caught.value.status == 422 and "input.prompt" in str(caught.value.detail)


def test_a_language_model_is_an_iterator_that_joins_to_the_text(
    client: replicate.Client,
) -> None:
    out = client.run(f"acme/llm:{LLM_VERSION}",
                     input={"prompt": "hello big world", "stream": True, "max_length": 9})
    assert not isinstance(out, (str, list))
    assert "".join(out) == "HELLO BIG WORLD"


def test_a_version_less_route_reports_latest_version_with_its_schema(
    client: replicate.Client,
) -> None:
    model = client.models.get("acme/chat")
    assert model.latest_version is not None
    schema = model.latest_version.openapi_schema["components"]["schemas"]
    assert schema["Input"]["properties"]["prompt"]["type"] == "string"
    assert schema["Output"]["x-cog-array-type"] == "iterator"
    assert schema["Output"]["x-cog-array-display"] == "concatenate"


def test_one_declared_uri_is_one_file_output(client: replicate.Client) -> None:
    out = client.run(f"acme/image:{IMAGE_VERSION}", input={"prompt": "pic", "output_kind": "file"})
    assert isinstance(out, FileOutput)
    assert out.read() == b"PIC"


def test_a_list_of_uris_is_a_list_of_file_outputs(client: replicate.Client) -> None:
    out = client.run(f"acme/pictures:{PICTURES_VERSION}", input={"prompt": "two",
                                                                 "num_outputs": 2})
    assert isinstance(out, list) and len(out) == 2
    assert all(isinstance(item, FileOutput) and item.read() == b"TWO" for item in out)


def test_a_declared_string_is_a_string(client: replicate.Client) -> None:
    assert client.run(f"acme/text:{TEXT_VERSION}", input={"prompt": "hello"}) == "HELLO"


@pytest.mark.parametrize(
    ("model", "given", "seen"),
    [
        (f"acme/image:{IMAGE_VERSION}", {"prompt": "pic", "output_kind": "file"},
         {"text": "PIC"}),
        (f"acme/text:{TEXT_VERSION}", {"prompt": "hello", "stream": True}, "HELLO"),
        (f"acme/llm:{LLM_VERSION}", {"prompt": "hello big world", "max_length": 9},
         ["HELLO ", "BIG ", "WORLD"]),
        (f"acme/pictures:{PICTURES_VERSION}", {"prompt": "two", "num_outputs": 2},
         [{"text": "TWO"}, {"text": "TWO"}]),
    ],
)
def test_the_js_client_gets_the_declared_shape(
    stack: Stack, tls: ServerTLS, tmp_path: Path, model: str, given: dict[str, Any], seen: Any,
) -> None:
    env = {"CUTOVER_BASE_URL": stack.url, "CUTOVER_TOKEN": LIVE_TOKEN, "CUTOVER_MODEL": model,
           "NODE_EXTRA_CA_CERTS": str(tls.ca_file)}
    output = run_js(tmp_path, env, "run", json.dumps(given))["output"]
    if isinstance(seen, dict):  # one FileOutput, from owned storage
        assert output["text"] == seen["text"] and "/assets/" in output["file"]
    elif isinstance(seen, list) and isinstance(seen[0], dict):  # a list of FileOutputs
        assert [item["text"] for item in output] == [item["text"] for item in seen]
        assert all("/assets/" in item["file"] for item in output)
    else:
        assert output == seen
