"""`make demo-migration`: moving a route to a new provider, end to end, on real Cog servers.

The route ``acme/noise`` is served by a real Cog server running ``examples/noise`` (the
control: a picture blended with random noise, different on every run) and is moved to a
second Cog server running its ``CandidatePredictor`` (the same model with the red channel
lifted by 10 levels: a deliberate, small difference). Apps are ten callers, each the
unmodified ``replicate`` client with its own API token, so the sticky canary has callers
to split. The operator's side is the real ``cutover routes`` / ``cutover shadow``
commands and the admin API, as the README's walkthrough describes (docs/shadow.md,
docs/canary.md). In order:

1. a work dir (``.demo-migration/``, kept afterwards; ``--work DIR`` for another), a CA
   and a certificate for 127.0.0.1, both Cog servers and ``cutover serve`` (HTTPS,
   SQLite), each in its own process group, each waited for (polled, with a deadline);
2. ``cutover routes set-shadow acme/noise 100``: every control prediction is run again,
   hidden, on the candidate (half of them on the control a second time instead: the noise
   baseline); the callers send predictions until at least 20 copies of each kind are
   made, then wait for them to finish;
3. ``cutover shadow report``: the Markdown report is printed (its first two worst
   mismatches; all of it is written to ``<work>/shadow-report.md``), the HTML page written
   to ``<work>/shadow-report.html`` (the admin page ``GET /admin/routes/acme/noise/
   shadow-report`` serves the same); it must show the colour cast in every pair, no
   contract break and no other measure;
4. ``cutover routes set-canary acme/noise 10``, then 50, then 100: after each step, every
   caller sends one prediction, and each must be served by the arm its sticky bucket says
   (which provider served it: ``GET /admin/predictions/{id}``);
5. a forced failure: the candidate's Cog server is stopped and started again with
   ``NOISE_FAIL=1`` (a bad deploy: every prediction fails); the callers keep sending until
   the guard (``max_error_rate`` 20 %) rolls the canary back to 0 by itself; the audit is
   printed, the guard's entry with its reason and the numbers of both arms;
6. one more round: every caller is back on the control, and succeeds;
7. everything started is stopped (SIGTERM, then SIGKILL), also on failure or Ctrl-C.

Exit status: 0 when every step did what it should; 1 otherwise, after the logs' tails;
130 on Ctrl-C. About two minutes on a busy 2-core machine (load 9), most of it the
predictions themselves: each Cog server has one slot, and the control's also runs the
baseline copies (after the apps' waiting predictions).

    .venv/bin/python examples/migration.py [--work DIR]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import secrets
import ssl
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import demo
import httpx
import replicate
import tomli_w
from demo import Service, expect, rel, say, since

from gateway.rollout import canary

ROOT = Path(__file__).resolve().parent.parent
NOISE_DIR = ROOT / "examples" / "noise"
WORK = ROOT / ".demo-migration"
ROUTE = "acme/noise"
CALLERS = [f"r8_demo_caller_{i:02d}" for i in range(10)]  # local demo values, not credentials
ADMIN = "adm_demo_operator"  # a local demo value, not a credential
COG_TOKEN = secrets.token_hex(16)  # what Cog's webhooks carry, new every run
STEPS = (10, 50, 100)
PARALLEL = 4  # callers' predictions in flight at once
MIN_PAIRS = 20  # of each kind (candidate, baseline) before the report is read
MAX_SHADOWED = 120  # predictions sent in the shadow phase, at most
SHOWN_WORST = 2  # worst mismatches printed (all are in the file)
LIVE_S = 10.0  # a route change must be live within this (the gateway promises 2 s)
ROLLBACK_S = 60.0


class Stack:
    """What the steps talk to: the gateway (as callers and as operator) and its config."""

    def __init__(self, base_url: str, config: Path, tls: demo.Tls) -> None:
        self.base_url = base_url
        self.config = config
        os.environ["SSL_CERT_FILE"] = str(tls.ca)  # how the callers' httpx trusts cutover
        self.clients = {token: replicate.Client(api_token=token, base_url=base_url)
                        for token in CALLERS}
        self.http = httpx.Client(verify=ssl.create_default_context(cafile=str(tls.ca)),
                                 headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30.0)
        self.sent = 0

    def cli(self, *args: str) -> str:
        """Run ``cutover ARGS --config FILE`` (the operator's command line); its output."""
        argv = [str(demo.VENV_BIN / "cutover"), *args, "--config", str(self.config)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
        expect(done.returncode == 0, f"`cutover {' '.join(args)}` exited "
                                     f"{done.returncode}: {done.stderr.strip()[-600:]}")
        return done.stdout.strip()

    def admin(self, path: str, **params: str) -> Any:
        response = self.http.get(f"{self.base_url}/admin{path}", params=params)
        expect(response.status_code == 200, f"GET /admin{path}: {response.status_code} "
                                            f"{response.text[:300]}")
        return response.json()

    def predict(self, token: str, prompt: str) -> dict[str, Any]:
        """One prediction from caller ``token`` (held open with ``Prefer: wait``, then
        polled until terminal, within ``demo.STEP_S``): its id, status, and the arm and
        provider that served it (from the admin API; apps never see them)."""
        deadline = time.monotonic() + demo.STEP_S
        made = self.clients[token].predictions.create(model=ROUTE, input={"prompt": prompt},
                                                      wait=10)
        while made.status not in demo.TERMINAL:
            expect(time.monotonic() < deadline, f"{made.id} not finished after "
                                                f"{demo.STEP_S:g} s")
            time.sleep(demo.POLL_INTERVAL_S)
            made.reload()
        owner = self.admin(f"/predictions/{made.id}")
        return {"caller": token, "id": made.id, "status": made.status,
                "arm": owner["arm"], "provider": owner["provider"], "shadows": owner["shadows"]}

    def round(self, prompts: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Predictions for ``(caller token, prompt)`` pairs, ``PARALLEL`` at a time."""
        with ThreadPoolExecutor(PARALLEL) as pool:
            done = list(pool.map(lambda tp: self.predict(*tp), prompts))
        self.sent += len(done)
        return done

    def canary_percent(self) -> float:
        return float(self.admin(f"/routes/{ROUTE}")["spec"]["canary_percent"])


def expected_arm(token: str, percent: float) -> str:
    """The arm the gateway's sticky draw gives caller ``token`` at ``percent``."""
    key = "token:" + hashlib.sha256(token.encode()).hexdigest()
    return canary.choose_arm(ROUTE, key, percent)


def write_config(work: Path, *, gw_port: int, control: int, candidate: int,
                 tls: demo.Tls) -> Path:
    """The gateway's TOML config: two Cog providers, the route with its candidate, shadow
    policy, baseline share, budget and guard (keys as in examples/cutover.example.toml)."""
    def cog(port: int) -> dict[str, str]:
        return {"kind": "cog", "base_url": f"http://127.0.0.1:{port}",
                "webhook_auth_token": COG_TOKEN}

    config = {
        "gateway": {
            "listen": f"127.0.0.1:{gw_port}", "public_url": f"https://127.0.0.1:{gw_port}",
            "tls_cert_file": str(tls.cert), "tls_key_file": str(tls.key),
            "database_url": f"sqlite+aiosqlite:///{work / 'cutover.db'}",
            "storage_url": (work / "assets").as_uri(), "api_tokens": CALLERS,
            "guard_interval_s": 1.0, "loop_interval_s": 0.1,
        },
        "admin": {"tokens": [{"name": "operator", "token": ADMIN}]},
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": {"old-cog": cog(control), "new-cog": cog(candidate)},
        "routes": [{
            "model": ROUTE, "provider": "old-cog", "candidate": "new-cog",
            "guard": {"max_error_rate": 0.2, "min_samples": 5, "window_s": 600,
                      "max_contract_break_rate": 0.05},
            "shadow_policy": {"allow_fields": ["prompt", "seed"], "max_input_bytes": 4096,
                              "rules": [{"field": "prompt", "type": "string",
                                         "max_length": 500}]},
            "baseline_percent": 50,
            "shadow_budget": {"max_concurrent": 20, "max_per_hour": 1000},
        }],
    }
    path = work / "cutover.toml"
    path.write_text("# written by examples/migration.py\n" + tomli_w.dumps(config))
    return path


# --- the steps ------------------------------------------------------------------------------


def shadow_phase(stack: Stack) -> None:
    say(f"== 1/5 shadow first: cutover routes set-shadow {ROUTE} 100")
    say("   " + stack.cli("routes", "set-shadow", ROUTE, "100", "--reason",
                          "compare the new server before moving anyone"))
    started, made = time.monotonic(), Counter[str]()
    while made["new-cog"] < MIN_PAIRS or made["old-cog"] < MIN_PAIRS:
        expect(stack.sent < MAX_SHADOWED, f"fewer than {MIN_PAIRS} shadows of each kind "
                                          f"after {stack.sent} predictions: {dict(made)}")
        done = stack.round([(caller, f"a quiet lake, take {stack.sent + i}")
                            for i, caller in enumerate(CALLERS)])
        expect(all(p["status"] == "succeeded" for p in done),
               f"a control prediction did not succeed: {done}")
        made.update(s["provider"] for p in done for s in p["shadows"])
        say(f"   {stack.sent} predictions sent, all succeeded; their hidden copies: "
            f"{made['new-cog']} on new-cog, {made['old-cog']} on old-cog again ({since(started)})")
    deadline = time.monotonic() + demo.STEP_S
    while True:  # the copies finish after their primaries (the control's one slot)
        got = stack.admin(f"/routes/{ROUTE}/shadow-report", format="json")
        if got["pairs"] >= made["new-cog"] and got["baseline_pairs"] >= made["old-cog"]:
            break
        expect(time.monotonic() < deadline, f"shadows unfinished after {demo.STEP_S:g} s: "
                                            f"{got['pairs']} and {got['baseline_pairs']} pairs")
        time.sleep(demo.POLL_INTERVAL_S)
    say(f"   every copy finished: {got['pairs']} candidate pairs, {got['baseline_pairs']} "
        f"control-vs-control pairs ({since(started)})")


def report_phase(stack: Stack, work: Path) -> None:
    say(f"== 2/5 the report: cutover shadow report --route {ROUTE} --format md")
    text = stack.cli("shadow", "report", "--route", ROUTE, "--format", "md")
    (work / "shadow-report.md").write_text(text + "\n", encoding="utf-8")
    lines = text.splitlines()
    cut = next((i for i, line in enumerate(lines) if line.startswith(f"### {SHOWN_WORST + 1}. ")),
               len(lines))
    for line in lines[:cut]:
        say(f"   | {line}")
    if cut < len(lines):
        say(f"   | ... {len(lines) - cut} more lines (the other worst mismatches): the whole "
            f"report is in {rel(work / 'shadow-report.md')}")
    page = work / "shadow-report.html"
    say("   " + stack.cli("shadow", "report", "--route", ROUTE, "--format", "html",
                          "--output", str(page)))
    say(f"   open {rel(page)} in a browser (one offline page), or the admin page "
        f"{stack.base_url}/admin/routes/{ROUTE}/shadow-report with the admin token")
    got = stack.admin(f"/routes/{ROUTE}/shadow-report", format="json")
    reported = {m["measure"]: m["reported"]["count"] for m in got["measures"]
                if m["reported"]["count"]}
    pairs = got["pairs"]
    expect(got["contract_breaks"]["count"] == 0, f"contract breaks: {got['contract_breaks']}")
    expect(set(reported) == {"image_color"}, f"reported measures: {reported}")
    expect(reported["image_color"] == pairs, f"colour cast in {reported} of {pairs} pairs")
    say(f"   -> the red shift (image_color) in {reported['image_color']} of {pairs} pairs, "
        "no contract break, nothing else. The verdict blocks: the candidate differs beyond "
        "the\n      control's own noise. Here that is the deliberate change, so the operator "
        "accepts it: shadowing off, canary next")
    say("   " + stack.cli("routes", "set-shadow", ROUTE, "0", "--reason",
                          "report read: the colour cast is the known change"))


def wait_live(stack: Stack, percent: float, previous: float) -> None:
    """Poll (deadline ``LIVE_S``) until a caller the step moves is served by the candidate."""
    moved = [t for t in CALLERS
             if expected_arm(t, percent) == "candidate" != expected_arm(t, previous)]
    if not moved:
        return
    deadline = time.monotonic() + LIVE_S
    while stack.predict(moved[0], "is the change live?")["arm"] != "candidate":
        expect(time.monotonic() < deadline, f"canary {percent}% not live after {LIVE_S:g} s")


def canary_phase(stack: Stack) -> None:
    previous = 0.0
    for step, percent in enumerate(STEPS, 1):
        say(f"== 3/5 canary step {step}/{len(STEPS)}: cutover routes set-canary {ROUTE} "
            f"{percent}")
        say("   " + stack.cli("routes", "set-canary", ROUTE, str(percent), "--reason",
                              f"step {step}: shadow report read, no contract break"))
        wait_live(stack, percent, previous)
        done = stack.round([(t, f"a red barn, step {step}") for t in CALLERS])
        wrong = [p for p in done if p["arm"] != expected_arm(p["caller"], percent)]
        expect(not wrong, f"callers on the wrong arm at {percent}%: {wrong}")
        expect(all(p["status"] == "succeeded" for p in done), f"failures at {percent}%: {done}")
        on = sum(p["arm"] == "candidate" for p in done)
        say(f"   -> {on} of {len(CALLERS)} callers served by new-cog, {len(CALLERS) - on} by "
            "old-cog, every one where its sticky bucket says; all succeeded")
        previous = percent
    say(f"== cutover routes show {ROUTE}")
    for line in stack.cli("routes", "show", ROUTE).splitlines():
        say(f"   {line}")


def failure_phase(stack: Stack, services: list[Service], tls: demo.Tls, work: Path,
                  port: int) -> None:
    say("== 4/5 a forced failure: the candidate's Cog server is restarted with NOISE_FAIL=1")
    candidate = next(s for s in services if s.name == "candidate Cog")
    demo.stop(candidate)
    started = time.monotonic()
    services.append(failing := start_noise(work, port, tls, "failing Cog", failing=True))
    demo.wait_until("the failing Cog was READY", functools.partial(demo.cog_ready, port),
                    demo.COG_READY_S, alive=failing)
    say(f"   new-cog is back, failing every prediction ({since(started)})")
    started, failed = time.monotonic(), 0
    while stack.canary_percent() > 0:
        expect(time.monotonic() - started < ROLLBACK_S,
               f"the guard did not roll back within {ROLLBACK_S:g} s")
        done = stack.round([(t, "a broken deploy") for t in CALLERS[:PARALLEL]])
        failed += sum(p["status"] == "failed" for p in done)
    say(f"   -> the guard rolled the canary back to 0 after {failed} failed predictions "
        f"({since(started)} after the first)")
    changes = stack.admin(f"/routes/{ROUTE}/changes", limit="10")["results"]
    say("   the audit, newest first (GET /admin/routes/acme/noise/changes):")
    for change in changes:
        after = change["after"]
        say(f"   #{change['id']} {change['at']} {change['who']:<8} {change['action']:<10} "
            f"canary {after['canary_percent']:g}% shadow {after['shadow_percent']:g}%: "
            f"{change['reason']}")
    guard = changes[0]
    expect((guard["who"], guard["action"]) == ("guard", "rollback"),
           f"the newest change is not the guard's rollback: {guard}")
    evidence = {arm: guard["evidence"][arm] for arm in ("control", "candidate")}
    say(f"   the guard's numbers: {json.dumps(evidence)}")


def after_rollback(stack: Stack) -> None:
    say("== 5/5 after the rollback every caller is on old-cog again")
    done = stack.round([(t, "a calm evening") for t in CALLERS])
    expect(all(p["provider"] == "old-cog" and p["status"] == "succeeded" for p in done),
           f"not every caller is back on the control: {done}")
    say(f"   -> {len(done)} of {len(done)} served by old-cog, all succeeded")


def start_noise(work: Path, port: int, tls: demo.Tls, name: str, *,
                candidate: bool = True, failing: bool = False) -> Service:
    stub = "predict.py:CandidatePredictor" if candidate else "predict.py:Predictor"
    env = {"WEBHOOK_AUTH_TOKEN": COG_TOKEN, **({"NOISE_FAIL": "1"} if failing else {})}
    return demo.start_cog(work, port, tls, model_dir=NOISE_DIR, stub=stub, name=name, env=env)


def migration(services: list[Service], work: Path) -> None:
    """Steps 1-6 of the module docstring; every service started is appended at once."""
    control_port, candidate_port, gw_port = demo.free_ports(3)
    work = demo.fresh_work_dir(work)
    base_url = f"https://127.0.0.1:{gw_port}"
    say(f"== work dir {rel(work)}/; Cog old-cog on :{control_port}, new-cog on "
        f":{candidate_port}, gateway on {base_url}")
    tls = demo.make_tls(work)
    started = time.monotonic()
    services.append(start_noise(work, control_port, tls, "control Cog", candidate=False))
    services.append(start_noise(work, candidate_port, tls, "candidate Cog"))
    for service, port in zip(services, (control_port, candidate_port), strict=True):
        demo.wait_until(f"{service.name} was READY", functools.partial(demo.cog_ready, port),
                        demo.COG_READY_S, alive=service)
    say(f"== both Cog servers with examples/noise are READY ({since(started)})")
    config = write_config(work, gw_port=gw_port, control=control_port,
                          candidate=candidate_port, tls=tls)
    started = time.monotonic()
    services.append(gateway := demo.start_gateway(work, config))
    ca = ssl.create_default_context(cafile=str(tls.ca))
    demo.wait_until("/health answered", lambda: demo.gateway_ready(base_url, ca),
                    demo.GATEWAY_READY_S, alive=gateway)
    say(f"== cutover serve --config {rel(config)} is up ({since(started)}); "
        f"{len(CALLERS)} callers, each a replicate.Client with its own token")
    stack = Stack(base_url, config, tls)
    shadow_phase(stack)
    report_phase(stack, work)
    canary_phase(stack)
    failure_phase(stack, services, tls, work, candidate_port)
    after_rollback(stack)
    say(f"== {stack.sent} predictions in all; job rows in {rel(work / 'cutover.db')}, "
        f"files under {rel(work / 'assets')}/, logs {rel(work)}/*.log")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=WORK, help="work dir (emptied first)")
    work_dir = parser.parse_args().work.resolve()
    sys.exit(demo.main(functools.partial(migration, work=work_dir), work_dir))
