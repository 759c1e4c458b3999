"""``cutover routes`` / ``cutover shadow``: the answer alone, and nothing left open.

Every command used to print the gateway's JSON log lines (alembic's migration lines, one
``route_seeded`` per route) on stderr before its answer, and ``shadow report`` never
closed the owned storage it opened. Now stderr carries warnings and errors only (as text;
``--verbose`` adds the info lines) and the storage and engine are closed on the way out.
The commands run as the operator runs them: the real CLI in another process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gateway import assembly
from gateway.config import Settings
from gateway.rollout import cli as routecli
from tests.support.gateway import settings_dict

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, database_url: str, *extra_routes: dict[str, Any]) -> Path:
    data = settings_dict(database_url, str(tmp_path / "assets"))
    data["routes"] += extra_routes
    path = tmp_path / f"cutover{len(extra_routes)}.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    return path


async def _cutover(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_route_commands_print_their_answer_without_json_log_lines(
    database_url: str, tmp_path: Path,
) -> None:
    config = str(_config(tmp_path, database_url))
    code, out, err = await _cutover("routes", "list", "--config", config)
    assert (code, err) == (0, "")  # the first run migrates and seeds: silently
    assert "acme/plain" in out and not out.startswith("{")
    code, out, err = await _cutover("shadow", "report", "--route", "acme/plain",
                                    "--config", config)
    assert (code, err) == (0, "")
    assert out.startswith("# Shadow report: acme/plain")
    code, out, err = await _cutover("routes", "set-canary", "acme/plain", "5",
                                    "--reason", "x", "--config", config)
    assert code == 1 and out == ""
    assert err.splitlines() == ["cutover: invalid route change: canary_percent needs a "
                                "candidate provider"]
    config = str(_config(tmp_path, database_url, {"model": "acme/new", "provider": "fake"}))
    code, out, err = await _cutover("routes", "list", "--verbose", "--config", config)
    assert code == 0 and "acme/new" in out
    lines = err.splitlines()
    assert lines and not [line for line in lines if line.startswith("{")]
    assert any(" info gateway.rollout.sync route_seeded route=\"acme/new\"" in line
               for line in lines), lines


async def test_a_reason_over_1000_characters_is_a_usage_error(
    database_url: str, tmp_path: Path,
) -> None:
    """A 100 KB --reason was stored in the audit and printed back (docs/canary.md)."""
    config = str(_config(tmp_path, database_url))
    code, out, err = await _cutover("routes", "rollback", "acme/plain",
                                    "--reason", "x" * 100_000, "--config", config)
    assert (code, out) == (2, "")
    assert "--reason" in err and "1000" in err and "x" * 1001 not in err
    code, out, err = await _cutover("routes", "show", "acme/plain", "--json",
                                    "--config", config)
    assert code == 0 and "x" * 1001 not in out


async def test_shadow_report_closes_the_storage_it_opens(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(**settings_dict(database_url, str(tmp_path / "assets")))
    opened: list[Any] = []
    closed: list[Any] = []

    def storage_for(settings: Settings) -> Any:
        storage = real_storage_for(settings)
        real_close = storage.aclose

        async def aclose() -> None:
            closed.append(storage)
            await real_close()

        storage.aclose = aclose  # type: ignore[method-assign]
        opened.append(storage)
        return storage

    real_storage_for = assembly.storage_for
    monkeypatch.setattr(assembly, "storage_for", storage_for)
    args = argparse.Namespace(command="shadow", action="report", route="acme/plain",
                              since=None, format="json", output=None)
    assert await routecli.run(settings, args) == 0
    assert len(opened) == 1 and closed == opened


@pytest.mark.parametrize("fmt", ["md", "json", "html"])
async def test_the_shadow_report_of_a_route_without_a_candidate_says_so(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str,
) -> None:
    """It said "HOLD acme/plain: 0 pairs ... - 0 of the 100 pairs needed", as if pairs
    were on their way (docs/shadow.md 'The verdict')."""
    settings = Settings(**settings_dict(database_url, str(tmp_path / "assets")))
    args = argparse.Namespace(command="shadow", action="report", route="acme/plain",
                              since=None, format=fmt, output=None)
    assert await routecli.run(settings, args) == 0
    out = capsys.readouterr().out
    assert "HOLD" not in out and "pairs needed" not in out
    assert "NO CANDIDATE acme/plain: the route has no candidate provider" in out
    if fmt == "json":
        verdict = json.loads(out)["verdict"]
        assert verdict["decision"] == "no-candidate"
