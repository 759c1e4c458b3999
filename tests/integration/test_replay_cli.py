"""``cutover shadow replay`` on the gateway's host (docs/cutover-day.md, "Replaying
recorded inputs"): the command writes only the replay's row, and the serving gateway's
replay loop does the work; ``--status`` and ``--stop`` read and stop it, running the
command again resumes a stopped replay (``--new`` starts another), and bad input exits 1
with the reason and changes nothing. The real CLI, in another process, on the store the
gateway uses (SQLite: the store's part runs on both backends in test_replay.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
import tomli_w

from gateway.store.schema import jobs, shadow_replays
from tests.integration.test_replay import ROUTE, _sections
from tests.integration.test_route_cli_output import _cutover
from tests.support.gateway import GatewayHarness, settings_dict
from tests.support.replay import record_rows


async def _replays(gateway: GatewayHarness) -> list[Any]:
    async with gateway.store.engine.connect() as conn:
        return list(await conn.execute(sa.select(shadow_replays)))


async def _jobs_of(gateway: GatewayHarness, replay_id: str) -> int:
    async with gateway.store.engine.connect() as conn:
        query = sa.select(sa.func.count()).where(jobs.c.replay_id == replay_id)
        return int((await conn.execute(query)).scalar_one())


async def test_the_command_writes_the_row_and_the_gateway_does_the_work(
        make_gateway: Any, database_url: str, tmp_path: Path) -> None:
    gateway = await make_gateway(**_sections())
    await record_rows(gateway, ROUTE, 5)
    config = tmp_path / "cutover.toml"
    config.write_bytes(tomli_w.dumps(
        settings_dict(database_url, str(tmp_path / "assets"), **_sections())).encode())
    where = ("--config", str(config))

    code, out, err = await _cutover("shadow", "replay", ROUTE, "--detach", "--since", "7d",
                                    *where)
    assert code == 0, err
    replay_id = out.strip()
    assert err.startswith(f"started replay {replay_id}: 5 recorded inputs")
    assert await _jobs_of(gateway, replay_id) == 0  # the command sends nothing itself
    code, out, _ = await _cutover("shadow", "replay", ROUTE, "--status", *where)
    assert code == 0 and out.startswith(f"replay {replay_id} running [") and " 0/5 inputs" in out

    for refused, reason in (
        (("--new", "--detach"), "has a running replay already"),
        (("--new", "--limit", "0"), "limit must be from 1"),
    ):
        code, out, err = await _cutover("shadow", "replay", ROUTE, *refused, *where)
        assert (code, out) == (1, ""), err
        assert reason in err
    code, _, err = await _cutover("shadow", "replay", "acme/nothing", *where)
    assert code == 1 and "does not exist" in err
    assert [r.id for r in await _replays(gateway)] == [replay_id]  # nothing changed

    code, out, _ = await _cutover("shadow", "replay", ROUTE, "--stop", *where)
    assert code == 0 and out.startswith(f"replay {replay_id} stopped")
    await gateway.settle()
    assert await _jobs_of(gateway, replay_id) == 0  # stopped: the gateway sends nothing
    code, out, err = await _cutover("shadow", "replay", ROUTE, "--detach", *where)
    assert (code, out.strip()) == (0, replay_id)  # run again: the stopped one resumes
    assert err.startswith(f"resuming replay {replay_id}")
    await gateway.settle()  # the gateway's replay loop takes the row
    assert await _jobs_of(gateway, replay_id) == 3  # the budget's room: max_concurrent 3
    code, out, _ = await _cutover("shadow", "replay", ROUTE, "--status", "--format", "json",
                                  *where)
    assert code == 0 and '"state": "running"' in out and '"created": 3' in out
