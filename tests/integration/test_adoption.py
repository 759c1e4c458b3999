"""Cutover day: predictions created directly on the legacy provider (the Replicate wire
fake) before the app was repointed are read, waited on, streamed and cancelled by the
unmodified replicate client through cutover, which adopts them; their file outputs are
owned and outlive the upstream's copy; unknown ids are 404 and cost a bounded number of
upstream lookups (docs/cutover-day.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import replicate
import sqlalchemy as sa

from gateway import cli, ids
from gateway.store.engine import db
from gateway.store.schema import jobs
from tests.support.background import BackgroundLoop
from tests.support.databases import BACKENDS, run_sync, sync_database
from tests.support.live import ECHO_VERSION, LIVE_TOKEN
from tests.support.process import GatewayProcess, listen_port
from tests.support.upstreams.replicate import REPLICATE_TOKEN, FakeReplicate
from tests.support.waiting import wait_until_sync

pytestmark = pytest.mark.every_backend  # the store's SQL is the point (docs/testing.md)

BURST, PER_S = 5, 1.0
BILLING_TOKEN = "r8_billing_tenant_token"  # a test value, not a credential
TERMINAL = {"succeeded", "failed", "canceled"}


@dataclass
class Cutover:
    url: str
    database_url: str
    upstream: FakeReplicate
    config_path: Path
    loop: BackgroundLoop


@pytest.fixture(scope="module", params=BACKENDS)
def cutover(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cutover]:
    workdir: Path = tmp_path_factory.mktemp(f"adopt-{request.param}")
    with ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        loop = BackgroundLoop()
        stack.callback(loop.close)
        upstream = FakeReplicate(auto=True, token=REPLICATE_TOKEN)
        loop.run(upstream.__aenter__())
        stack.callback(lambda: loop.run(upstream.__aexit__(None, None, None)))
        env.setenv("IT_LEGACY_TOKEN", REPLICATE_TOKEN)
        database_url = stack.enter_context(sync_database(str(request.param), workdir))
        port = listen_port()
        config: dict[str, Any] = {
            "gateway": {
                "listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}",
                "database_url": database_url, "storage_url": f"file://{workdir / 'assets'}",
                "api_tokens": [LIVE_TOKEN], "loop_interval_s": 0.1,
                "legacy_provider": "r8", "legacy_lookups_per_s": PER_S,
                "legacy_lookup_burst": BURST, "legacy_unknown_ttl_s": 600,
            },
            "providers": {"r8": {"kind": "replicate", "base_url": upstream.url,
                                 "token_env": "IT_LEGACY_TOKEN", "fetch_interval_s": 0.2,
                                 "fetch_max_interval_s": 0.5}},
            "routes": [{"model": "acme/echo", "version": ECHO_VERSION, "provider": "r8"}],
            "tenants": [{"name": "billing", "api_tokens": [BILLING_TOKEN]}],
        }
        process = GatewayProcess(config, workdir).start()
        stack.callback(process.stop)
        yield Cutover(process.url, database_url, upstream, process.config_path, loop)


def _client(url: str, token: str) -> Iterator[replicate.Client]:
    made = replicate.Client(api_token=token, base_url=url)
    made.poll_interval = 0.1
    yield made
    http = made._Client__client  # type: ignore[attr-defined]
    if http is not None:
        http.close()


@pytest.fixture
def app(cutover: Cutover) -> Iterator[replicate.Client]:
    """The app after cutover day: its client points at cutover."""
    yield from _client(cutover.url, LIVE_TOKEN)


@pytest.fixture
def before(cutover: Cutover) -> Iterator[replicate.Client]:
    """The app before cutover day: its client points at the legacy provider."""
    yield from _client(cutover.upstream.url, REPLICATE_TOKEN)


def _rows(cutover: Cutover, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    async def read() -> dict[str, dict[str, Any]]:
        engine = db.create_engine(cutover.database_url)
        try:
            async with engine.connect() as conn:
                found = await conn.execute(sa.select(jobs).where(jobs.c.id.in_(job_ids)))
                return {row.id: dict(row._mapping) for row in found}
        finally:
            await engine.dispose()

    return run_sync(read())


def _row(cutover: Cutover, job_id: str) -> dict[str, Any]:
    found = _rows(cutover, [job_id])
    assert job_id in found, f"{job_id} is not stored"
    return found[job_id]


def test_a_prediction_started_upstream_is_read_and_waited_on_and_its_file_is_owned(
    cutover: Cutover, app: replicate.Client, before: replicate.Client
) -> None:
    started = before.predictions.create(
        version=ECHO_VERSION,
        input={"prompt": "hello", "steps": 4, "delay": 0.25, "output_kind": "file"},
    )
    p = app.predictions.get(started.id)
    assert p.id == started.id and p.status in {"starting", "processing"}
    p.wait()
    assert p.status == "succeeded"
    assert isinstance(p.output, str) and p.output.startswith(cutover.url), p.output
    row = _row(cutover, started.id)
    assert row["adopted"] is True and row["provider"] == "r8"
    assert row["upstream"]["id"] == started.id and row["input"]["prompt"] == "hello"
    upstream_job = cutover.upstream.jobs[started.id]
    cutover.upstream.files.clear()  # the legacy provider forgets the file and the prediction
    cutover.upstream.expire(upstream_job)
    assert httpx.get(p.output, timeout=10).content == b"HELLO"
    assert app.predictions.get(started.id).output == p.output


def test_a_finished_upstream_prediction_is_adopted_with_its_file_copied(
    cutover: Cutover, app: replicate.Client, before: replicate.Client
) -> None:
    started = before.predictions.create(
        version=ECHO_VERSION, input={"prompt": "done", "output_kind": "file"})
    before_done = started
    wait_until_sync(lambda: (before_done.reload(), before_done.status == "succeeded")[1])
    p = app.predictions.get(started.id)
    assert p.status == "succeeded" and p.output.startswith(cutover.url)
    cutover.upstream.files.clear()
    assert httpx.get(p.output, timeout=10).content == b"DONE"


def test_a_prediction_started_upstream_streams_through_cutover(
    cutover: Cutover, app: replicate.Client, before: replicate.Client
) -> None:
    started = before.predictions.create(
        version=ECHO_VERSION, input={"prompt": "hello world", "steps": 2, "delay": 0.2},
        stream=True)
    events = list(app.predictions.get(started.id).stream())
    assert "".join(str(e) for e in events if e.event.value == "output") == "HELLO WORLD"
    assert events[-1].event.value == "done"


def test_a_prediction_started_upstream_is_cancelled_through_cutover(
    cutover: Cutover, app: replicate.Client, before: replicate.Client
) -> None:
    started = before.predictions.create(
        version=ECHO_VERSION, input={"prompt": "long", "steps": 200, "delay": 0.5})
    p = app.predictions.cancel(started.id)  # its first sight at cutover is the cancel
    assert p.id == started.id
    wait_until_sync(lambda: (p.reload(), p.status in TERMINAL)[1], what="the cancel")
    assert p.status == "canceled"
    assert cutover.upstream.jobs[started.id].cancel_requested


def test_an_adopted_prediction_belongs_to_the_tenant_that_asked_first(
    cutover: Cutover, before: replicate.Client
) -> None:
    started = before.predictions.create(version=ECHO_VERSION, input={"prompt": "mine"})
    billing = {"Authorization": f"Bearer {BILLING_TOKEN}"}
    other = {"Authorization": f"Bearer {LIVE_TOKEN}"}
    url = f"{cutover.url}/v1/predictions/{started.id}"
    assert httpx.get(url, headers=billing, timeout=10).status_code == 200
    assert _row(cutover, started.id)["tenant"] == "billing"
    assert httpx.get(url, headers=other, timeout=10).status_code == 404  # not looked up again
    assert httpx.post(url + "/cancel", headers=other, timeout=10).status_code == 404


def test_an_id_the_upstream_does_not_know_is_404(cutover: Cutover,
                                                 app: replicate.Client) -> None:
    with pytest.raises(replicate.exceptions.ReplicateError) as raised:
        app.predictions.get(ids.new_prediction_id())
    assert raised.value.status == 404


def test_unknown_ids_cost_a_bounded_number_of_upstream_lookups(cutover: Cutover) -> None:
    unknown = [ids.new_prediction_id() for _ in range(500)]
    began = time.monotonic()
    answers: list[int] = []
    with httpx.Client(base_url=cutover.url, timeout=10,
                      headers={"Authorization": f"Bearer {LIVE_TOKEN}"}) as http:
        # the module's earlier tests may have spent the bucket: the first id waits for a
        # token (503 until then, no lookup made), then its 404 is the negative cache's
        wait_until_sync(lambda: http.get(f"/v1/predictions/{unknown[0]}").status_code == 404,
                        what="a lookup token for the first unknown id")
        for job_id in unknown + [unknown[0]] * 500:  # 1,000 GETs of unknown ids
            answers.append(http.get(f"/v1/predictions/{job_id}").status_code)
    elapsed = time.monotonic() - began
    asked = [path.rsplit("/", 1)[-1] for op, path in cutover.upstream.requests
             if op == "status"]
    made = sum(1 for job_id in asked if job_id in set(unknown))
    assert set(answers) <= {404, 503}, set(answers)
    assert answers[0] == 404  # looked up: unknown upstream
    assert made <= BURST + PER_S * elapsed + 1, (made, elapsed)
    assert asked.count(unknown[0]) == 1  # the negative cache answers its repeats
    assert set(answers[500:]) == {404}


def test_import_twice_stores_each_finished_prediction_once_and_lists_them_in_time_order(
    cutover: Cutover, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = cutover.loop.run(cutover.upstream.seed(500))  # newest first, a minute apart
    gone = seeded[10:13]
    for job_id in gone:  # the upstream already deleted these files
        del cutover.upstream.files[f"{job_id}.txt"]
    argv = ["import", "--config", str(cutover.config_path), "--from", "r8", "--since", "30d"]
    assert cli.main(argv) == 0
    first = capsys.readouterr()
    assert "page 1:" in first.err and " imported, " in first.out
    rows = _rows(cutover, seeded)
    assert len(rows) == 500
    assert all(r["adopted"] and r["state"] == "completed" for r in rows.values())
    assert {i for i, r in rows.items() if r["data_removed"]} == set(gone)
    assert all(rows[i]["output"] is None for i in gone)
    assert cli.main(argv) == 0  # twice: nothing added
    assert capsys.readouterr().out.startswith("0 imported, ")
    assert len(_rows(cutover, seeded)) == 500
    cutover.upstream.files.clear()
    owned = rows[seeded[0]]["output"]
    assert owned.startswith(cutover.url) and httpx.get(owned, timeout=10).content == b"P0"
    assert [i for i in _listed(cutover) if i in set(seeded)] == seeded


def test_import_refuses_a_provider_that_is_not_the_replicate_kind(cutover: Cutover) -> None:
    argv = ["import", "--config", str(cutover.config_path), "--from", "nope", "--since", "1d"]
    assert cli.main(argv) == 2


def _listed(cutover: Cutover) -> list[str]:
    """Every prediction id GET /v1/predictions shows, page after page (newest first)."""
    listed: list[str] = []
    url: str | None = f"{cutover.url}/v1/predictions"
    with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {LIVE_TOKEN}"}) as http:
        while url is not None:
            page = http.get(url).json()
            listed += [p["id"] for p in page["results"]]
            url = page["next"]
    return listed
