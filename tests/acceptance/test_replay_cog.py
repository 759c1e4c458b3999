"""``cutover shadow replay`` on two real Cog servers (docs/cutover-day.md, "Replaying
recorded inputs"): 200 predictions are recorded through a serving gateway on the control
(examples/noise), then the command, run beside it on the same store, replays their
inputs on the candidate (the same model with its red channel lifted by 10 levels) and 20 %
of them on the control again. The gateway's replay loop does the work within the route's
shadow budget while the command shows its progress; its report, marked as the replay,
finds the colour cast in at least 99 % of pairs and nothing else. A second replay through
the admin API (the command's remote form), with the control itself as the candidate,
reports fewer than 1 % of its pairs different: no false difference from the baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import tomli_w

from tests.support.cog_server import CogServer
from tests.support.process import GatewayProcess, listen_port
from tests.support.replay import API_TOKEN, ROUTE, noise_cogs, record, replay_config

pytestmark = [pytest.mark.cog, pytest.mark.timeout(300)]

INPUTS = 200
ADMIN_TOKEN = "adm_replay_cog_token"  # a test value, not a credential
PARALLEL = 4


@pytest.fixture(scope="module")
def cogs() -> Iterator[dict[str, CogServer]]:
    with noise_cogs() as started:
        yield started


def cutover(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "cutover"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, check=False,
                          env={**{k: v for k, v in os.environ.items()
                                  if not k.startswith("CUTOVER_")}, **(env or {})})


def test_a_replay_of_recorded_inputs_finds_the_colour_cast_and_no_false_difference(
        cogs, tmp_path):
    port = listen_port()
    settings = replay_config(tmp_path, port, cogs,
                             admin=[{"name": "operator", "token": ADMIN_TOKEN}])
    gateway = GatewayProcess(settings, tmp_path).start()
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0,
                          headers={"Authorization": f"Bearer {API_TOKEN}"}) as http, \
                ThreadPoolExecutor(PARALLEL) as pool:
            prompts = [f"picture {i % 5} take {i}" for i in range(INPUTS)]
            assert set(pool.map(lambda p: record(http, p), prompts)) == {"succeeded"}
        config_path = tmp_path / "cli.toml"
        config_path.write_text(tomli_w.dumps(settings))

        # the local form: the command writes the replay's row; the gateway does the work
        done = cutover("shadow", "replay", ROUTE, "--since", "1h", "--limit", str(INPUTS),
                       "--format", "json", "--output", str(tmp_path / "replay.json"),
                       "--config", str(config_path))
        assert done.returncode == 0, done.stderr + gateway.log_tail()
        lines = done.stderr.splitlines()
        assert lines[0].startswith("started replay ") and f"{INPUTS} recorded inputs" in lines[0]
        shown = [line for line in lines if line.startswith("replay ")]
        assert len(shown) >= 3 and "running" in shown[0]  # its progress, as it went
        assert " finished [####################] 100% " in shown[-1]
        found = json.loads((tmp_path / "replay.json").read_text())
        assert found["replay"]["inputs"] == INPUTS and found["replay"]["state"] == "finished"
        assert (found["pairs"], found["baseline_pairs"]) == (INPUTS, INPUTS // 5)
        assert found["contract_breaks"]["count"] == 0
        caught = found["differences"]["count"]
        print(f"replay: control vs candidate, {caught} of {INPUTS} pairs different")
        assert caught >= 0.99 * INPUTS
        reported = {m["measure"]: m["reported"]["count"] for m in found["measures"]}
        assert reported["image_color"] == caught
        assert {k: n for k, n in reported.items() if k != "image_color" and n}.keys() == set()
        assert found["verdict"]["decision"] == "block"

        # control vs control, through the admin API: no false difference
        remote = ["--url", gateway.url, "--admin-token-env", "REPLAY_ADMIN"]
        changed = cutover("routes", "change", ROUTE, "--set", "candidate=old-again",
                          "--reason", "control vs control", *remote,
                          env={"REPLAY_ADMIN": ADMIN_TOKEN})
        assert changed.returncode == 0, changed.stderr
        quiet = cutover("shadow", "replay", ROUTE, "--new", "--format", "json", *remote,
                        env={"REPLAY_ADMIN": ADMIN_TOKEN})
        assert quiet.returncode == 0, quiet.stderr + gateway.log_tail()
        again = json.loads(quiet.stdout)
        assert again["replay"]["id"] != found["replay"]["id"] and again["pairs"] == INPUTS
        print(f"replay: control vs control, {again['differences']['count']} of {INPUTS} "
              "pairs different")
        assert again["differences"]["count"] < 0.01 * INPUTS
        status = cutover("shadow", "replay", ROUTE, "--status", *remote,
                         env={"REPLAY_ADMIN": ADMIN_TOKEN})
        assert status.returncode == 0
        assert status.stdout.startswith(f"replay {again['replay']['id']} finished")
    finally:
        gateway.stop()
