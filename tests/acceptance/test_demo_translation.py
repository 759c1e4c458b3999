"""`make demo-translation` runs to the end (examples/translation.py): a route moved from a
real Cog server to a fal-shaped candidate (examples/fal_noise.py). The script checks each
step itself and exits 1 when one does not hold: without maps every shadow pair is a
contract break (one URI against fal's object), with the maps (changed live through the
admin API) none is, and after the canary ``replicate.run`` gets one ``FileOutput`` from
fal. This runs it in a work dir of its own and reads what it printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.acceptance.test_demo_migration import run_demo

pytestmark = [pytest.mark.cog, pytest.mark.timeout(600)]


def test_the_translation_demo_shows_maps_turn_every_contract_break_into_none(tmp_path: Path):
    status, output = run_demo(tmp_path / "work", "translation.py")
    assert status == 0, output[-6000:]
    assert "== demo passed" in output
    without = re.search(r"without maps: (\d+) pairs, (\d+) contract break", output)
    with_maps = re.search(r"with the maps: (\d+) pairs, (\d+) contract break", output)
    assert without and with_maps, output[-4000:]
    assert int(without[1]) >= 6 and without[1] == without[2]  # every pair a break
    assert int(with_maps[1]) >= 6 and with_maps[2] == "0"
    assert "maps        fal output: .images[0].url" in output
    assert "replicate.run gave one FileOutput from fal" in output
