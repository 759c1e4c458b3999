"""Canary cutover end to end: two real Cog servers, two gateway processes, the real client.

The control is the echo model; the candidate a variant whose answer ends in ``!``. Two
gateway processes share one database; the canary is changed with the real ``cutover
routes`` command (a third process) and the admin API, and each change must be live on
both gateways within 2 s, while predictions already in flight finish where they started.
Then a failure burst on the candidate makes the guard roll the canary back by itself.
"""

from __future__ import annotations

import functools
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import replicate

from gateway.rollout import canary
from tests.support.cog_server import CogServer
from tests.support.databases import DEFAULT_BACKENDS, sync_database
from tests.support.fixtures import COG_WEBHOOK_TOKEN, ECHO_MODEL_DIR
from tests.support.live import ECHO_VERSION, LIVE_TOKEN, live_config
from tests.support.process import GatewayProcess, listen_port
from tests.support.tls import ServerTLS
from tests.support.waiting import wait_until_sync

pytestmark = [pytest.mark.cog, pytest.mark.timeout(240)]

ROUTE = f"acme/echo:{ECHO_VERSION}"
ADMIN = "adm_live_test_token"  # a test value, not a credential
LIVE_WITHIN_S = 2.0
TERMINAL = {"succeeded", "failed", "canceled"}


@pytest.fixture(scope="module")
def candidate_cog(tls: ServerTLS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CogServer]:
    """The echo model with a deliberate difference: its answers end in ``!``."""
    model_dir = tmp_path_factory.mktemp("echo-variant")
    source = (ECHO_MODEL_DIR / "predict.py").read_text()
    assert "shout = prompt.upper()" in source
    (model_dir / "predict.py").write_text(
        source.replace("shout = prompt.upper()", 'shout = prompt.upper() + "!"')
    )
    env = {"WEBHOOK_AUTH_TOKEN": COG_WEBHOOK_TOKEN, "SSL_CERT_FILE": str(tls.ca_file)}
    with CogServer(model_dir, env=env) as server:
        yield server


def _config(database_url: str, workdir: Path, tls: ServerTLS, control: str, candidate: str):
    config = live_config(
        database_url=database_url, workdir=workdir, tls=tls, cog_url=control,
        cog_token=COG_WEBHOOK_TOKEN, port=listen_port(), guard_interval_s=1.0,
    )
    config["providers"]["candidate-cog"] = {
        "kind": "cog", "base_url": candidate, "webhook_auth_token": COG_WEBHOOK_TOKEN,
    }
    config["routes"][0].update(
        candidate="candidate-cog",
        guard={"max_error_rate": 0.5, "min_samples": 3, "window_s": 120},
        shadow_policy={"allow_fields": ["prompt"], "max_input_bytes": 1024},
        baseline_percent=25,
        shadow_budget={"max_concurrent": 4, "max_per_hour": 1000},
        shadow_thresholds={"margins": {"text": 0.01}},  # one "!" in a dozen characters
    )
    config["admin"] = {"tokens": [{"name": "ops-alice", "token": ADMIN}]}
    return config


class Stack:
    """Two gateways on one database, a client for each, and admin/CLI helpers."""

    def __init__(self, gateways: list[GatewayProcess], ca_file: Path) -> None:
        self.gateways = gateways
        self.clients = [replicate.Client(api_token=LIVE_TOKEN, base_url=g.url) for g in gateways]
        self.http = httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file)),
                                 timeout=10.0)
        self.created: list[Any] = []

    def close(self) -> None:
        self.http.close()
        for client in self.clients:  # the client has no close() of its own
            http = client._Client__client  # type: ignore[attr-defined]
            if http is not None:
                http.close()

    def admin(self, method: str, path: str, gateway: int = 0, **kwargs: Any) -> httpx.Response:
        url = f"{self.gateways[gateway].url}/admin{path}"
        return self.http.request(method, url, headers={"Authorization": f"Bearer {ADMIN}"},
                                 **kwargs)

    def owner(self, prediction_id: str, gateway: int = 0) -> str:
        response = self.admin("GET", f"/predictions/{prediction_id}", gateway)
        assert response.status_code == 200, response.text
        return str(response.json()["provider"])

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = shutil.which("cutover", path=str(Path(sys.executable).parent))
        assert command
        return subprocess.run(
            [command, "routes", *args, "--config", str(self.gateways[0].config_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )

    def create(self, gateway: int, **data: Any) -> Any:
        made = self.clients[gateway].predictions.create(
            version=ECHO_VERSION, input={"prompt": "probe", **data}
        )
        self.created.append(made)
        return made

    def drain(self) -> None:
        """Wait for every prediction this test made (the Cog servers have one slot)."""
        for prediction in self.created:
            self.finish(prediction)
        self.created.clear()

    def seconds_until_served_by(self, provider: str) -> float:
        """Create probes on every gateway until each is served by ``provider``."""
        started, pending = time.monotonic(), set(range(len(self.gateways)))

        def served() -> bool:
            for index in list(pending):
                if self.owner(self.create(index).id, index) == provider:
                    pending.discard(index)
            return not pending

        wait_until_sync(served, 10, what=f"every gateway serving {provider}")
        return time.monotonic() - started

    def finish(self, prediction: Any, timeout_s: float = 60.0) -> Any:
        def finished() -> bool:
            if prediction.status in TERMINAL:
                return True
            prediction.reload()
            return prediction.status in TERMINAL

        wait_until_sync(finished, timeout_s, what=f"{prediction.id} finished")
        return prediction


@pytest.fixture(scope="module", params=DEFAULT_BACKENDS)
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tls: ServerTLS,
    https_cog: CogServer,
    candidate_cog: CogServer,
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp(f"canary-{request.param}")
    with sync_database(request.param, workdir) as database_url:
        gateways = []
        try:
            for _ in range(2):
                config = _config(database_url, workdir, tls, https_cog.url, candidate_cog.url)
                gateways.append(GatewayProcess(config, workdir, ca_file=tls.ca_file).start())
            made = Stack(gateways, tls.ca_file)
            yield made
            made.close()
        finally:
            for gateway in gateways:
                gateway.stop()


def test_canary_moves_live_and_rolls_back_live(stack: Stack):
    assert stack.clients[0].run(ROUTE, input={"prompt": "hi"}) == "HI"
    in_flight = stack.create(0, prompt="slow", delay=2.0)
    assert stack.owner(in_flight.id) == "local-cog"

    done = stack.cli("set-canary", ROUTE, "100", "--reason", "all in on the candidate")
    assert done.returncode == 0, done.stderr
    assert stack.seconds_until_served_by("candidate-cog") < LIVE_WITHIN_S
    assert stack.clients[1].run(ROUTE, input={"prompt": "new"}) == "NEW!"
    assert stack.finish(in_flight).output == "SLOW"  # finished where it started
    assert stack.owner(in_flight.id) == "local-cog"

    on_candidate = stack.create(1, prompt="later", delay=2.0)
    wait_until_sync(  # accepted there: a rollback moves only what the candidate never took
        lambda: stack.admin("GET", f"/predictions/{on_candidate.id}").json()["provider_job_id"],
        30.0, what="the candidate accepted it")
    rolled = stack.admin("POST", f"/routes/{ROUTE}/rollback", 1,
                         json={"reason": "answers end in a bang"})
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["who"] == "ops-alice"
    assert stack.seconds_until_served_by("local-cog") < LIVE_WITHIN_S
    assert stack.finish(on_candidate).output == "LATER!"
    assert stack.owner(on_candidate.id, 1) == "candidate-cog"

    shown = stack.cli("show", ROUTE)
    assert shown.returncode == 0, shown.stderr
    assert "cli set-canary" in shown.stdout and "all in on the candidate" in shown.stdout
    assert "ops-alice rollback" in shown.stdout and "answers end in a bang" in shown.stdout
    app_view = stack.http.get(f"{stack.gateways[0].url}/v1/predictions/{in_flight.id}",
                              headers={"Authorization": f"Bearer {LIVE_TOKEN}"}).json()
    assert not {"provider", "arm", "route"} & set(app_view)  # never shown to the app
    assert "local-cog" not in str(app_view)
    stack.drain()


def test_a_failure_burst_on_the_candidate_rolls_back_within_60_s(stack: Stack):
    done = stack.cli("set-canary", ROUTE, "100", "--reason", "try again")
    assert done.returncode == 0, done.stderr
    stack.seconds_until_served_by("candidate-cog")
    burst = [stack.create(i % 2, prompt=f"boom {i}", fail=True) for i in range(4)]
    finished = [stack.finish(p) for p in burst]
    assert {p.status for p in finished} <= {"failed", "succeeded"}

    def rolled_back() -> Any:
        route = stack.admin("GET", f"/routes/{ROUTE}").json()
        return route if route["spec"]["canary_percent"] == 0 else None

    route = wait_until_sync(rolled_back, 60, what="the guard's rollback")
    last = route["changes"][0]
    assert (last["who"], last["action"]) == ("guard", "rollback")
    assert "error rate" in last["reason"]
    assert last["evidence"]["candidate"]["failed"] >= 3
    metrics = stack.http.get(f"{stack.gateways[0].url}/metrics").text
    assert "cutover_route_error_ratio" in metrics
    stack.drain()


def _shadow_provider(prediction_id: str) -> str:
    """Where the gateway sends a shadowed prediction's copy: the control again for the
    ``baseline_percent`` (25) of them drawn on the prediction id, else the candidate."""
    baseline = canary.sampled(f"baseline:{ROUTE}", prediction_id, 25)
    return "local-cog" if baseline else "candidate-cog"


def test_shadow_pairs_report_the_candidates_difference_and_nothing_else(stack: Stack):
    done = stack.cli("set-shadow", ROUTE, "100", "--reason", "compare first")
    assert done.returncode == 0, done.stderr
    def shadowed(gateway: int) -> Any:
        return stack.admin("GET", f"/predictions/{stack.create(gateway).id}",
                           gateway).json()["shadows"]

    for gateway in (0, 1):  # live on each gateway (its next create after the change)
        wait_until_sync(functools.partial(shadowed, gateway), 10, what="shadowing started")
    stack.drain()
    since = datetime.now(UTC).isoformat()
    made: list[Any] = []  # a baseline is drawn on the random id (25 %): 12 may hold none
    while len(made) < 12 or len({_shadow_provider(p.id) for p in made}) < 2:
        assert len(made) < 60, "no prediction drawn for the baseline in 60"
        made.append(stack.create(len(made) % 2, prompt=f"shadow me {len(made)}"))
    for prediction in made:
        assert stack.finish(prediction).output == f"SHADOW ME {made.index(prediction)}"

    def shadows_done() -> Any:  # the shadows finish on their own providers
        of = {p.id: stack.admin("GET", f"/predictions/{p.id}").json()["shadows"] for p in made}
        shadows = [s for each in of.values() for s in each]
        done = len(shadows) == len(made) and all(s["state"] == "completed" for s in shadows)
        return (of, shadows) if done else None

    of, shadows = wait_until_sync(shadows_done, 60, what="every shadow completed")
    assert {i: [s["provider"] for s in each] for i, each in of.items()} == {
        p.id: [_shadow_provider(p.id)] for p in made}
    assert {s["provider"] for s in shadows} == {"candidate-cog", "local-cog"}
    response = stack.admin("GET", f"/routes/{ROUTE}/shadow-report",
                           params={"format": "json", "since": since})
    assert response.status_code == 200, response.text
    report = response.json()
    candidates = sum(s["provider"] == "candidate-cog" for s in shadows)
    assert (report["pairs"], report["baseline_pairs"]) == (candidates, len(made) - candidates)
    assert report["contract_breaks"]["count"] == 0
    assert report["differences"]["count"] == candidates  # the trailing "!" in every pair
    reported = {m["measure"] for m in report["measures"] if m["reported"]["count"]}
    assert reported == {"text", "text_exact"}  # a changed text: its similarity, exact match
    page = stack.admin("GET", f"/routes/{ROUTE}/shadow-report")
    assert page.headers["content-type"].startswith("text/html")
    stack.cli("set-shadow", ROUTE, "0", "--reason", "enough")
    stack.drain()
