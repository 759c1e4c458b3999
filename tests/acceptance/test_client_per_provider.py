"""The unmodified ``replicate`` client through cutover, once per provider kind.

Each parameter is one gateway subprocess (HTTPS) in front of one upstream:

* ``cog``: the real Cog server (examples/echo);
* ``replicate-cutover``: a second cutover in front of that Cog server, reached as a
  ``replicate`` provider (a real server that speaks the Replicate API);
* ``fal``, ``runpod``, ``openai``, ``replicate``: their fake servers (tests/support/
  upstreams) in ``auto`` mode, behaving like the echo model and sending webhooks.

For each: ``run``, ``create`` + ``wait``, ``cancel`` and a file output.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
import replicate
from replicate.helpers import FileOutput

from tests.support.background import BackgroundLoop
from tests.support.cog_server import CogServer
from tests.support.databases import sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, running_gateway
from tests.support.process import GatewayProcess, listen_port
from tests.support.tls import ServerTLS
from tests.support.upstreams.base import FakeUpstream
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.upstreams.replicate import REPLICATE_TOKEN, FakeReplicate
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod
from tests.support.waiting import wait_until_sync

REF = f"acme/echo:{ECHO_VERSION}"
TERMINAL = {"succeeded", "failed", "canceled"}
KINDS = ["cog", "replicate-cutover", "fal", "runpod", "openai", "replicate"]
FAST_POLL = {"fetch_interval_s": 0.2, "fetch_max_interval_s": 1.0}


@dataclass
class Stack:
    """One gateway in front of one upstream, and what the tests need to know of it."""

    kind: str
    url: str
    text: Any  # run()'s answer for {"prompt": "hello"}
    long_input: dict[str, Any] = field(default_factory=dict)
    file_ref: str = REF


def _gateway_config(port: int, tls: ServerTLS | None, workdir: Any, database_url: str,
                    providers: dict[str, Any], routes: list[dict[str, Any]]) -> dict[str, Any]:
    gateway: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
        "database_url": database_url, "storage_url": f"file://{workdir / 'assets'}",
        "api_tokens": [LIVE_TOKEN], "loop_interval_s": 0.1,
    }
    if tls is not None:
        gateway.update(public_url=f"https://127.0.0.1:{port}", tls_cert_file=str(tls.cert_file),
                       tls_key_file=str(tls.key_file))
    return {
        "gateway": gateway,
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": providers,
        "routes": routes,
    }


def _fake(kind: str) -> tuple[FakeUpstream, dict[str, Any], str | None, str, str]:
    """The fake server, its provider settings (without base_url), target, env name, key."""
    if kind == "fal":
        return (FakeFal(auto=True, token=FAL_TOKEN), {"kind": "fal", "file_hosts": ["127.0.0.1"]},
                "fal-ai/echo", "IT_FAL_KEY", FAL_TOKEN)
    if kind == "runpod":
        return (FakeRunPod(auto=True, token=RUNPOD_TOKEN), {"kind": "runpod"}, "ep-echo",
                "IT_RUNPOD_KEY", RUNPOD_TOKEN)
    if kind == "openai":
        return (FakeOpenAI(token=OPENAI_TOKEN), {"kind": "openai", "max_concurrency": 4},
                "echo-1", "IT_OPENAI_KEY", OPENAI_TOKEN)
    return (FakeReplicate(auto=True, token=REPLICATE_TOKEN),
            {"kind": "replicate", "file_hosts": ["127.0.0.1"]}, "acme/echo",
            "IT_REPLICATE_TOKEN", REPLICATE_TOKEN)


def _base_url(kind: str, server: FakeUpstream) -> str:
    return {"runpod": f"{server.url}/v2", "openai": f"{server.url}/v1"}.get(kind, server.url)


@pytest.fixture(scope="module", params=KINDS)
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          tls: ServerTLS, https_cog: CogServer) -> Iterator[Stack]:
    kind = str(request.param)
    workdir = tmp_path_factory.mktemp(f"client-{kind}")
    long_cog = {"prompt": "cancel me", "steps": 80, "delay": 0.25}  # 20 s: room for a busy host
    with ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        if kind == "cog":
            live = stack.enter_context(running_gateway("sqlite", workdir, tls, https_cog.url))
            yield Stack(kind, live.url, "HELLO", long_cog)
            return
        if kind == "replicate-cutover":
            # The upstream cutover serves plain HTTP, so that the downstream one can copy
            # its output files (its downloads trust the public CAs only).
            cog = {"kind": "cog", "base_url": https_cog.url,
                   "webhook_auth_token": COG_WEBHOOK_TOKEN}
            upstream = _start(stack, workdir / "upstream", None, {"local-cog": cog},
                              [{"model": "acme/echo", "version": ECHO_VERSION,
                                "provider": "local-cog"}])
            env.setenv("IT_UPSTREAM_TOKEN", LIVE_TOKEN)
            provider = {"kind": "replicate", "base_url": upstream,
                        "token_env": "IT_UPSTREAM_TOKEN", **FAST_POLL}
            routes = [{"model": "acme/echo", "version": ECHO_VERSION, "provider": "up"}]
            yield Stack(kind, _start(stack, workdir, tls, {"up": provider}, routes), "HELLO",
                        long_cog)
            return
        loop = BackgroundLoop()
        stack.callback(loop.close)
        server, provider, target, env_name, key = _fake(kind)
        server.ssl_context = ssl.create_default_context(cafile=str(tls.ca_file))
        loop.run(server.__aenter__())
        stack.callback(lambda: loop.run(server.__aexit__(None, None, None)))
        env.setenv(env_name, key)
        provider = {**provider, "base_url": _base_url(kind, server), "token_env": env_name,
                    **FAST_POLL}
        routes = [{"model": "acme/echo", "version": ECHO_VERSION, "provider": "up",
                   "target": target}]
        providers = {"up": provider}
        text: Any = "HELLO"
        long_input = long_cog
        file_ref = REF
        if kind == "openai":
            providers["images"] = {**provider, "api": "images"}
            routes.append({"model": "acme/image", "provider": "images", "target": "img-1"})
            text, long_input, file_ref = ["HELLO"], {"prompt": "x", "max_tokens": 100}, "acme/image"
        yield Stack(kind, _start(stack, workdir, tls, providers, routes), text, long_input,
                    file_ref)


def _start(stack: ExitStack, workdir: Any, tls: ServerTLS | None, providers: dict[str, Any],
           routes: list[dict[str, Any]]) -> str:
    workdir.mkdir(parents=True, exist_ok=True)
    database_url = stack.enter_context(sync_database("sqlite", workdir))
    config = _gateway_config(listen_port(), tls, workdir, database_url, providers, routes)
    process = GatewayProcess(config, workdir, ca_file=tls.ca_file if tls else None).start()
    stack.callback(process.stop)
    return process.url


@pytest.fixture
def client(stack: Stack) -> Iterator[replicate.Client]:
    made = replicate.Client(api_token=LIVE_TOKEN, base_url=stack.url)
    yield made
    http = made._Client__client  # type: ignore[attr-defined]
    if http is not None:
        http.close()




def test_run(client: replicate.Client, stack: Stack):
    output = client.run(REF, input={"prompt": "hello"})
    if stack.kind == "openai":  # a language model: an iterator of chunks (x-cog-array-type)
        assert not isinstance(output, list)
        output = list(output)
    assert output == stack.text


def test_create_and_wait(client: replicate.Client, stack: Stack):
    p = client.predictions.create(version=ECHO_VERSION,
                                  input={"prompt": "hello", "steps": 2, "delay": 0.1})
    assert p.status in {"starting", "processing"}
    p.wait()
    assert (p.status, p.output) == ("succeeded", stack.text)
    assert client.predictions.get(p.id).output == stack.text


def test_cancel(client: replicate.Client, stack: Stack):
    p = client.predictions.create(version=ECHO_VERSION, input=stack.long_input)
    wait_until_sync(lambda: (p.reload(), p.status == "processing")[1])
    p.cancel()
    wait_until_sync(lambda: (p.reload(), p.status in TERMINAL)[1])
    assert p.status == "canceled"


def test_file_output(client: replicate.Client, stack: Stack):
    out = client.run(stack.file_ref, input={"prompt": "file me", "output_kind": "file"})
    files = _files(out)
    assert files and all(f.url.startswith(f"{stack.url}/assets/") for f in files)
    assert files[0].read() == b"FILE ME"


def _files(value: Any) -> list[FileOutput]:
    if isinstance(value, FileOutput):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _files(v)]
    if isinstance(value, list | tuple):
        return [f for v in value for f in _files(v)]
    return []
