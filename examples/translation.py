"""`make demo-translation`: a route moved from a real Cog server to a fal-shaped candidate,
with maps (docs/translation.md).

The route ``acme/noise`` is served by a real Cog server running ``examples/noise`` (one
picture per prediction: the model declares one URI). Its candidate answers in fal's wire
format (examples/fal_noise.py: fal's queue API, signed webhooks, and the result shape of
fal's image apps, ``{"images": [{"url": ...}], "seed": ..., ...}``). Apps are the
unmodified ``replicate`` client; the operator uses ``cutover routes`` and the admin API.

1. a work dir (``.demo-translation/``, kept; ``--work DIR``), a CA and a certificate for
   127.0.0.1, the Cog server, the fal wire server and ``cutover serve`` (HTTPS, SQLite),
   each in its own process group, each waited for;
2. shadow without maps: ``cutover routes set-shadow acme/noise 100``; the callers send
   predictions until the candidate made :data:`PAIRS` copies; the shadow report must show
   every pair a contract break (a URI string against fal's object);
3. the maps, changed live and audited (``PATCH /admin/routes/acme/noise``): the input
   map gives fal's ``image_size``, the output map picks ``.images[0].url``; ``cutover
   routes show`` prints them and ``cutover routes translate`` shows the request fal would
   get and what the app would see, calling nobody;
4. shadow with the maps: :data:`PAIRS` more; the report since the change must show 0
   contract breaks (the red shift of the candidate is a measure, not a break);
5. ``cutover routes set-canary acme/noise 100``: ``replicate.run`` now gets one
   ``FileOutput`` from fal, a PNG read through the gateway's own URL, as from Cog;
6. everything started is stopped, also on failure or Ctrl-C.

Exit status: 0 when every step did what it should; 1 otherwise, after the logs' tails;
130 on Ctrl-C.

    .venv/bin/python examples/translation.py [--work DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import ssl
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import demo
import httpx
import migration
import tomli_w
from demo import Service, expect, rel, say, since
from migration import ADMIN, CALLERS, ROUTE, Stack
from replicate.helpers import FileOutput

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".demo-translation"
PAIRS = 6
FAL_TOKEN = "fal-demo-key"  # noqa: S105 (a demo value: examples/fal_noise.py TOKEN)
MAPS = {"fal": {
    "input": "{prompt, seed, image_size: {width: 128, height: 128}, num_images: 1}",
    "output": ".images[0].url",
}}
FAL_RESULT = {"images": [{"url": "https://v3.fal.media/files/out.png", "width": 128}],
              "seed": 7, "has_nsfw_concepts": [False]}


def write_config(work: Path, *, gw_port: int, cog: int, fal: int, tls: demo.Tls) -> Path:
    """Cog as the control, the fal wire server as the candidate; no maps yet."""
    fal_url = f"http://127.0.0.1:{fal}"
    config = {
        "gateway": {
            "listen": f"127.0.0.1:{gw_port}", "public_url": f"https://127.0.0.1:{gw_port}",
            "tls_cert_file": str(tls.cert), "tls_key_file": str(tls.key),
            "database_url": f"sqlite+aiosqlite:///{work / 'cutover.db'}",
            "storage_url": (work / "assets").as_uri(), "api_tokens": CALLERS,
            "loop_interval_s": 0.1,
        },
        "admin": {"tokens": [{"name": "operator", "token": ADMIN}]},
        "webhooks": {"allow_hosts": ["127.0.0.1"]},
        "providers": {
            "old-cog": {"kind": "cog", "base_url": f"http://127.0.0.1:{cog}",
                        "webhook_auth_token": migration.COG_TOKEN},
            "fal": {"kind": "fal", "base_url": fal_url, "token_env": "FAL_KEY",
                    "jwks_url": f"{fal_url}/.well-known/jwks.json",
                    "file_hosts": ["127.0.0.1"], "max_concurrency": 4,
                    "fetch_interval_s": 0.5},
        },
        "routes": [{
            "model": ROUTE, "provider": "old-cog", "candidate": "fal",
            "candidate_target": "fal-ai/noise", "baseline_percent": 0,
            "shadow_policy": {"allow_fields": ["prompt", "seed"], "max_input_bytes": 4096},
            "shadow_budget": {"max_concurrent": 20, "max_per_hour": 1000},
        }],
    }
    path = work / "cutover.toml"
    path.write_text("# written by examples/translation.py\n" + tomli_w.dumps(config))
    return path


def shadowed(stack: Stack, since_at: str | None, what: str) -> dict[str, object]:
    """Predictions until the candidate made :data:`PAIRS` copies, then the report of the
    pairs created since ``since_at`` once all of them finished."""
    started, made = time.monotonic(), 0
    while made < PAIRS:
        expect(stack.sent < 100, f"only {made} shadows after {stack.sent} predictions")
        done = stack.round([(caller, f"a quiet lake, take {stack.sent + i}")
                            for i, caller in enumerate(CALLERS[:PAIRS - made])])
        expect(all(p["status"] == "succeeded" for p in done), f"a control failed: {done}")
        made += sum(s["provider"] == "fal" for p in done for s in p["shadows"])
    params = {"format": "json", **({"since": since_at} if since_at else {})}
    deadline = time.monotonic() + demo.STEP_S
    while (got := stack.admin(f"/routes/{ROUTE}/shadow-report", **params))["pairs"] < made:
        expect(time.monotonic() < deadline, f"{what}: {got['pairs']} of {made} pairs")
        time.sleep(demo.POLL_INTERVAL_S)
    breaks = got["contract_breaks"]
    say(f"   {what}: {got['pairs']} pairs, {breaks['count']} contract break(s) "
        f"({since(started)})")
    return dict(got)


def without_maps(stack: Stack) -> None:
    say(f"== 1/4 shadow fal without maps: cutover routes set-shadow {ROUTE} 100")
    say("   " + stack.cli("routes", "set-shadow", ROUTE, "100", "--reason",
                          "compare fal before moving anyone"))
    got = shadowed(stack, None, "without maps")
    breaks = got["contract_breaks"]
    expect(breaks["count"] == got["pairs"], f"not every pair is a contract break: {breaks}")
    text = stack.cli("shadow", "report", "--route", ROUTE, "--format", "md")
    for line in [ln for ln in text.splitlines() if "contract break" in ln][:3]:
        say(f"   | {line}")
    say("   -> every pair a contract break: Cog gives the app one URI, fal an object")


def add_maps(stack: Stack, base_url: str) -> str:
    say("== 2/4 the maps, changed live and audited (PATCH /admin/routes/acme/noise)")
    changed_at = datetime.now(UTC).isoformat()
    response = stack.http.patch(f"{base_url}/admin/routes/{ROUTE}", json={
        "maps": MAPS, "reason": "fal takes image_size and answers {images: [{url}]}"})
    expect(response.status_code == 200, f"PATCH maps: {response.status_code} {response.text}")
    for line in stack.cli("routes", "show", ROUTE).splitlines():
        if line.startswith(("maps", "route", "candidate")):
            say(f"   {line}")
    say(f"== cutover routes translate {ROUTE} --provider fal (a dry run, calling nobody)")
    text = stack.cli("routes", "translate", ROUTE, "--provider", "fal", "--input",
                     json.dumps({"prompt": "a quiet lake", "seed": 7}),
                     "--output", json.dumps(FAL_RESULT))
    for line in text.splitlines():
        say(f"   | {line}")
    return changed_at


def with_maps(stack: Stack, changed_at: str) -> None:
    say("== 3/4 shadow fal with the maps")
    got = shadowed(stack, changed_at, "with the maps")
    expect(got["contract_breaks"]["count"] == 0, f"contract breaks: {got['contract_breaks']}")
    say("   -> 0 contract breaks: the app would get one URI from fal, as from Cog")


def canary(stack: Stack) -> None:
    say(f"== 4/4 cutover routes set-canary {ROUTE} 100")
    say("   " + stack.cli("routes", "set-canary", ROUTE, "100", "--reason",
                          "0 contract breaks with the maps"))
    deadline = time.monotonic() + migration.LIVE_S
    while stack.predict(CALLERS[0], "is the change live?")["provider"] != "fal":
        expect(time.monotonic() < deadline, "the canary is not live")
    output = stack.clients[CALLERS[0]].run(ROUTE, input={"prompt": "a red barn", "seed": 3})
    expect(isinstance(output, FileOutput), f"replicate.run gave {type(output).__name__}")
    data = output.read()
    expect(data.startswith(b"\x89PNG"), "the file is not a PNG")
    say(f"   -> replicate.run gave one FileOutput from fal: {output.url} "
        f"({len(data)} bytes of PNG, copied to owned storage)")


def translation(services: list[Service], work: Path) -> None:
    cog_port, fal_port, gw_port = demo.free_ports(3)
    work = demo.fresh_work_dir(work)
    base_url = f"https://127.0.0.1:{gw_port}"
    say(f"== work dir {rel(work)}/; Cog on :{cog_port}, fal wire server on :{fal_port}, "
        f"gateway on {base_url}")
    tls = demo.make_tls(work)
    started = time.monotonic()
    services.append(cog := migration.start_noise(work, cog_port, tls, "control Cog",
                                                 candidate=False))
    argv = [sys.executable, str(ROOT / "examples" / "fal_noise.py"), "--port", str(fal_port),
            "--ca", str(tls.ca)]
    services.append(fal := demo.start("fal server", argv, cwd=ROOT, env=dict(os.environ),
                                      log=work / "fal-server.log"))
    jwks = f"http://127.0.0.1:{fal_port}/.well-known/jwks.json"
    demo.wait_until("the fal server answered", lambda: httpx.get(jwks).status_code == 200,
                    demo.GATEWAY_READY_S, alive=fal)
    demo.wait_until("the control Cog was READY", functools.partial(demo.cog_ready, cog_port),
                    demo.COG_READY_S, alive=cog)
    say(f"== Cog with examples/noise and the fal wire server are up ({since(started)})")
    config = write_config(work, gw_port=gw_port, cog=cog_port, fal=fal_port, tls=tls)
    os.environ["FAL_KEY"] = FAL_TOKEN  # the gateway reads the fal key from token_env
    services.append(gateway := demo.start_gateway(work, config))
    ca = ssl.create_default_context(cafile=str(tls.ca))
    demo.wait_until("/health answered", lambda: demo.gateway_ready(base_url, ca),
                    demo.GATEWAY_READY_S, alive=gateway)
    say(f"== cutover serve --config {rel(config)} is up")
    stack = Stack(base_url, config, tls)
    without_maps(stack)
    changed_at = add_maps(stack, base_url)
    with_maps(stack, changed_at)
    canary(stack)
    say(f"== {stack.sent} predictions in all; logs {rel(work)}/*.log")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=WORK, help="work dir (emptied first)")
    work_dir = parser.parse_args().work.resolve()
    sys.exit(demo.main(functools.partial(translation, work=work_dir), work_dir))
