"""The comparison on real Cog servers: examples/noise as control, its red-shifted variant
as candidate (coglet 0.23.1, outputs as data: URIs), no gateway in between.

Each server has one prediction slot, so predictions go one at a time. The control runs
twice per input for the baseline; the report must show the injected difference (the
colour cast) and nothing else, and a control-vs-control report must show nothing:
fewer than 1 % of control-vs-control pairs reported different, at least 99 % of
control-vs-candidate pairs caught, over 200 pairs of each (docs/shadow.md, "The noise
model"; about 10 s on this machine, as each prediction takes milliseconds).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from shadow import compare, report
from shadow.outcome import Outcome, OutputFile
from tests.support.cog_server import CogServer
from tests.support.replay import noise_cogs

pytestmark = pytest.mark.cog

BASELINE = 30
PAIRS = 200


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, CogServer]]:
    with noise_cogs() as started:
        yield started


async def post_when_free(client: httpx.AsyncClient, server: CogServer, prompt: str
                         ) -> httpx.Response:
    """POST a prediction, again while the one slot is still busy (409 "at capacity")."""
    while True:
        response = await client.post(f"{server.url}/predictions",
                                     json={"input": {"prompt": prompt}})
        if response.status_code != 409:
            return response
        await asyncio.sleep(0.02)  # polling the slot, not waiting for readiness


async def predict(client: httpx.AsyncClient, server: CogServer, prompt: str, tmp: Path
                  ) -> Outcome:
    """One synchronous Cog prediction, its data: URI output saved as a file."""
    created = datetime.now(UTC)
    response = await asyncio.wait_for(post_when_free(client, server, prompt), 30.0)
    completed = datetime.now(UTC)
    response.raise_for_status()
    body = response.json()
    header, _, payload = body["output"].partition(",")
    data = base64.b64decode(payload)
    digest = hashlib.sha256(data).hexdigest()
    path = tmp / f"{digest}.png"
    path.write_bytes(data)
    file = OutputFile(content_type=header.removeprefix("data:").split(";")[0],
                      size_bytes=len(data), sha256=digest, path=path,
                      url=f"https://gateway.test/files/{digest}")
    # a synchronous Cog answer has no timestamps, only metrics.predict_time (seconds)
    started = completed - timedelta(seconds=body["metrics"]["predict_time"])
    times = {"created_at": created, "started_at": max(created, started),
             "completed_at": completed}
    return Outcome(status="completed" if body["status"] == "succeeded" else "failed",
                   error=body.get("error"), output=file.url, files=(file,), **times)


async def run_pairs(client, first: CogServer, second: CogServer, prefix: str, count: int,
                    tmp: Path) -> list[compare.PairComparison]:
    found = []
    for index in range(count):
        prompt = f"{prefix} {index}"
        found.append(await compare.compare(
            await predict(client, first, prompt, tmp), await predict(client, second, prompt, tmp),
            pair_id=prompt,
        ))
    return found


@pytest.mark.timeout(600)
async def test_real_cog_servers_show_the_colour_cast_and_nothing_else(servers, tmp_path):
    control, candidate = servers["control"], servers["candidate"]
    async with httpx.AsyncClient(timeout=60.0) as client:
        baseline = await run_pairs(client, control, control, "base", BASELINE, tmp_path)
        shifted = await run_pairs(client, control, candidate, "pair", PAIRS, tmp_path)
        again = await run_pairs(client, control, control, "again", PAIRS, tmp_path)

    shadow_report = report.build("noise", shifted, baseline)
    assert shadow_report.contract_breaks.count == 0
    caught = shadow_report.differences.count
    print(f"control vs candidate: {caught} of {PAIRS} pairs reported different")
    assert caught >= 0.99 * PAIRS
    reported = {m.measure: m.reported.count for m in shadow_report.measures}
    assert reported["image_color"] == caught
    others = {name: n for name, n in reported.items() if name != "image_color"}
    assert others == dict.fromkeys(others, 0)
    assert shadow_report.verdict.decision == "block"
    assert shadow_report.latency["run"]["control"].n == PAIRS

    quiet = report.build("noise", again, baseline)
    print(f"control vs control: {quiet.differences.count} of {PAIRS} pairs reported different")
    assert quiet.differences.count < 0.01 * PAIRS, [m.judgement for m in quiet.worst]
    page = report.render(await report.with_previews(shadow_report), "html")
    assert page.count('src="data:image/png;base64,') >= 2
