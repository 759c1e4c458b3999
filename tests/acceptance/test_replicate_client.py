"""The unmodified ``replicate`` client (1.0.7) -> the gateway (HTTPS subprocess) -> real Cog.

One gateway per database backend serves the whole module; the Cog server has a single
prediction slot, so every test waits for its predictions to end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
import replicate
from replicate.exceptions import ModelError, ReplicateError
from replicate.helpers import FileOutput

from tests.support.cog_server import CogServer
from tests.support.databases import DEFAULT_BACKENDS
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, LiveGateway, running_gateway
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until_sync

MODEL = "acme/echo"
REF = f"{MODEL}:{ECHO_VERSION}"
TERMINAL = {"succeeded", "failed", "canceled"}


@pytest.fixture(scope="module", params=DEFAULT_BACKENDS)
def live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS,
    https_cog: CogServer,
) -> Iterator[LiveGateway]:
    workdir = tmp_path_factory.mktemp(f"live-{request.param}")
    with running_gateway(request.param, workdir, tls, https_cog.url) as gateway:
        yield gateway


@pytest.fixture
def client(live: LiveGateway) -> Iterator[replicate.Client]:
    made = replicate.Client(api_token=LIVE_TOKEN, base_url=live.url)
    yield made
    close_client(made)


def close_client(client: replicate.Client) -> None:
    """Close the client's pooled connections (it has no close() of its own)."""
    http = client._Client__client  # type: ignore[attr-defined]
    if http is not None:
        http.close()




def test_run_by_version_returns_the_models_text(client: replicate.Client):
    assert client.run(REF, input={"prompt": "hello"}) == "HELLO"


def test_run_by_model_name_uses_the_official_route(client: replicate.Client):
    assert client.run(MODEL, input={"prompt": "official"}) == "OFFICIAL"


def test_run_returns_json_output(client: replicate.Client):
    out = client.run(REF, input={"prompt": "j", "output_kind": "json"})
    assert out == {"prompt": "j", "steps": 1}


def test_file_output_is_served_from_owned_storage(client: replicate.Client, live: LiveGateway):
    out = client.run(REF, input={"prompt": "file me", "output_kind": "file"})
    assert isinstance(out, FileOutput)
    assert out.url.startswith(f"{live.url}/assets/")
    assert out.read() == b"FILE ME"
    # Readable without a token too (the JS client sends none: specs §8.3).
    assert httpx.get(out.url).content == b"FILE ME"


def test_several_file_outputs_keep_their_bytes(client: replicate.Client):
    first, second = client.run(REF, input={"prompt": "two", "output_kind": "files"})
    assert first.read() == b"TWO"
    assert second.read() == bytes(range(256)) * 4


def test_async_run(client: replicate.Client):
    async def run() -> object:
        try:
            return await client.async_run(REF, input={"prompt": "async"})
        finally:
            await client._async_client.aclose()

    assert asyncio.run(run()) == "ASYNC"


def test_create_then_wait_fills_every_field(client: replicate.Client, live: LiveGateway):
    p = client.predictions.create(version=ECHO_VERSION, input={"prompt": "slow", "steps": 3})
    assert p.status in {"starting", "processing"}
    assert p.urls["get"] == f"{live.url}/v1/predictions/{p.id}"
    p.wait()
    assert (p.status, p.output) == ("succeeded", "SLOW")
    assert "step 3/3" in p.logs
    assert p.created_at and p.started_at and p.completed_at
    assert p.metrics["predict_time"] > 0
    assert client.predictions.get(p.id).output == "SLOW"


def test_prefer_wait_that_expires_reports_starting(client: replicate.Client):
    started = time.monotonic()
    p = client.predictions.create(
        version=ECHO_VERSION, input={"prompt": "later", "delay": 3}, wait=1
    )
    assert time.monotonic() - started < 2.0
    assert p.status == "starting"
    p.wait()
    assert p.output == "LATER"


def test_model_failure_raises_model_error(client: replicate.Client):
    with pytest.raises(ModelError, match="asked to fail"):
        client.run(REF, input={"prompt": "boom", "fail": True})


def test_cancel_in_flight_ends_canceled_and_stays_so(client: replicate.Client):
    p = client.predictions.create(
        version=ECHO_VERSION, input={"prompt": "cancel me", "steps": 40, "delay": 0.25}
    )
    wait_until_sync(lambda: (p.reload(), p.status == "processing")[1])
    p.cancel()
    wait_until_sync(lambda: (p.reload(), p.status in TERMINAL)[1])
    assert p.status == "canceled" and p.output is None
    assert client.predictions.cancel(p.id).status == "canceled"


def test_busy_cog_queues_instead_of_failing(client: replicate.Client):
    predictions = [
        client.predictions.create(
            version=ECHO_VERSION, input={"prompt": f"q{i}", "steps": 2, "delay": 0.2}
        )
        for i in range(3)
    ]
    for i, p in enumerate(predictions):
        p.wait()
        assert (p.status, p.output) == ("succeeded", f"Q{i}")


def test_list_pages_hold_valid_predictions(client: replicate.Client, live: LiveGateway):
    p = client.predictions.create(version=ECHO_VERSION, input={"prompt": "listed"})
    page = client.predictions.list()
    assert p.id in {item.id for item in page.results}
    assert page.next is None or page.next.startswith(live.url)
    p.wait()


def test_models_and_versions_parse_in_the_client(client: replicate.Client):
    model = client.models.get(MODEL)
    version = model.versions.get(ECHO_VERSION)
    assert version.id == ECHO_VERSION
    p = client.predictions.create(version=version, input={"prompt": "legacy"})
    p.wait()
    assert p.output == "LEGACY"


def test_unknown_prediction_and_bad_token_are_client_errors(live: LiveGateway, client):  # type: ignore[no-untyped-def]
    with pytest.raises(ReplicateError) as missing:
        client.predictions.get("doesnotexist0000000000000a")
    assert missing.value.status == 404
    wrong = replicate.Client(api_token="r8_wrong", base_url=live.url)
    with pytest.raises(ReplicateError) as denied:
        wrong.predictions.list()
    close_client(wrong)
    assert denied.value.status == 401
