"""``replicate.stream()`` through the gateway in front of real Cog (examples/tokens):
tokens in order, a dropped connection resumed with ``Last-Event-ID`` without a gap or a
repeat, a finished prediction replayed (docs/streaming.md)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import replicate

from tests.support.databases import DEFAULT_BACKENDS
from tests.support.live import LIVE_TOKEN, LiveGateway
from tests.support.node import run_js
from tests.support.tls import ServerTLS
from tests.support.tokens import TOKENS_MODEL, running_tokens_gateway, tokens_cog

pytestmark = pytest.mark.cog
PROMPT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def tokens_server(tls: ServerTLS):  # type: ignore[no-untyped-def]
    with tokens_cog(tls) as server:
        yield server


@pytest.fixture(scope="module", params=DEFAULT_BACKENDS)
def live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS,
    tokens_server,  # type: ignore[no-untyped-def]
) -> Iterator[LiveGateway]:
    workdir = tmp_path_factory.mktemp(f"stream-{request.param}")
    with running_tokens_gateway(request.param, workdir, tls, tokens_server.url) as gateway:
        yield gateway


@pytest.fixture
def client(live: LiveGateway) -> Iterator[replicate.Client]:
    made = replicate.Client(api_token=LIVE_TOKEN, base_url=live.url)
    yield made
    for name in ("_Client__client", "_Client__async_client"):
        http = getattr(made, name, None)
        if isinstance(http, httpx.Client):
            http.close()


def test_python_stream_gives_the_tokens_in_order(client: replicate.Client) -> None:
    events = list(client.stream(TOKENS_MODEL, input={"prompt": PROMPT, "delay": 0.05}))
    assert "".join(str(e) for e in events if e.event.value == "output") == PROMPT
    assert events[-1].event.value == "done"
    assert [e.event.value for e in events].count("output") == len(PROMPT.split(" "))


async def test_python_async_stream(live: LiveGateway) -> None:
    client = replicate.Client(api_token=LIVE_TOKEN, base_url=live.url)
    text = ""
    async for event in await client.async_stream(TOKENS_MODEL, input={"prompt": PROMPT}):
        if event.event.value == "output":
            text += str(event)
    await client._async_client.aclose()  # type: ignore[attr-defined]
    assert text == PROMPT


def sse_events(text: str) -> list[tuple[str, str, str]]:
    """(event, id, data) of each event in an SSE body."""
    found = []
    for block in text.split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            if name in {"event", "id", "data"}:
                fields.setdefault(name, []).append(value)
        if "event" in fields:
            found.append((fields["event"][0], fields["id"][0], "\n".join(fields.get("data", []))))
    return found


def test_a_dropped_connection_resumes_without_a_gap(
    client: replicate.Client, live: LiveGateway
) -> None:
    prediction = client.models.predictions.create(
        TOKENS_MODEL, input={"prompt": PROMPT, "delay": 0.1}, stream=True
    )
    url = prediction.urls["stream"]
    seen: list[tuple[str, str, str]] = []
    with httpx.Client(timeout=30, verify=True) as http:
        # First connection: read three events, then drop it.
        with http.stream("GET", url, headers={"Accept": "text/event-stream"}) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            buffer = ""
            for chunk in answer.iter_text():
                buffer += chunk
                complete, _, buffer = buffer.rpartition("\n\n")
                seen.extend(e for e in sse_events(complete) if e[0] == "output")
                if len(seen) >= 3:
                    break
        seen = seen[:3]
        last_id = seen[-1][1]
        # Reconnect (no token header at all, as the JS client) with Last-Event-ID.
        rest = http.get(url, headers={"Last-Event-ID": last_id}, timeout=60)
    events = sse_events(rest.text)
    outputs = seen + [e for e in events if e[0] == "output"]
    assert "".join(data for _, _, data in outputs) == PROMPT
    assert events[-1][0] == "done"


def test_a_finished_prediction_replays_and_ends_with_done(
    client: replicate.Client,
) -> None:
    prediction = client.models.predictions.create(
        TOKENS_MODEL, input={"prompt": "one two"}, stream=True
    )
    prediction.wait()
    assert prediction.status == "succeeded"
    with httpx.Client(timeout=30, verify=True) as http:  # prepared by its handler itself
        answer = http.get(prediction.urls["stream"], headers={"X-Request-Id": "stream-1"})
    assert answer.headers["X-Request-Id"] == "stream-1"
    events = list(prediction.stream())
    assert "".join(str(e) for e in events if e.event.value == "output") == "one two"
    assert events[-1].event.value == "done"
    logs = "".join(e.data for e in events if e.event.value == "logs")
    assert "token 0" in logs


def test_the_stream_url_needs_its_token(client: replicate.Client) -> None:
    prediction = client.models.predictions.create(
        TOKENS_MODEL, input={"prompt": "x"}, stream=True
    )
    prediction.wait()
    bad = prediction.urls["stream"].replace("?t=", "?t=0")
    assert httpx.get(bad, timeout=10).status_code == 404


def js_env(live: LiveGateway, tls: ServerTLS) -> dict[str, str]:
    return {
        "CUTOVER_BASE_URL": live.url,
        "CUTOVER_TOKEN": LIVE_TOKEN,
        "CUTOVER_MODEL": TOKENS_MODEL,
        "NODE_EXTRA_CA_CERTS": str(tls.ca_file),
    }


def test_js_stream_gives_the_tokens_in_order(
    live: LiveGateway, tls: ServerTLS, tmp_path: Path
) -> None:
    seen = run_js(tmp_path, js_env(live, tls), "stream", PROMPT)
    events = seen["events"]
    assert "".join(e["data"] for e in events if e["event"] == "output") == PROMPT
    assert events[-1]["event"] == "done"
    assert all(e["id"] for e in events)


# --- file inputs through POST /v1/files, checked by the model itself -----------------


def test_python_file_input_reaches_cog_intact(client: replicate.Client) -> None:
    data = os.urandom(70_000)
    output = client.run(TOKENS_MODEL, input={"prompt": "done", "file": io.BytesIO(data)})
    assert list(output) == [f"sha256:{hashlib.sha256(data).hexdigest()}", "done"]
    uploaded = client.files.list()
    assert any(f.checksums["sha256"] == hashlib.sha256(data).hexdigest() for f in uploaded)


def test_js_blob_input_goes_through_the_files_api(
    live: LiveGateway, tls: ServerTLS, tmp_path: Path
) -> None:
    data = os.urandom(40_000)
    seen = run_js(tmp_path, js_env(live, tls), "upload", base64.b64encode(data).decode())
    uploads = [c for c in seen["calls"] if c["path"] == "/v1/files"]
    assert uploads and all(c["status"] == 201 for c in uploads), seen["calls"]
    assert seen["output"] == [f"sha256:{hashlib.sha256(data).hexdigest()}", "checked"]
