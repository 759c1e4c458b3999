"""Golden tests of each adapter's raw status -> canonical state table (docs/providers.md).

The golden file is the reviewed mapping; a change to an adapter's table must change it
(and the docs) on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from adapters import cog, fal, openai, replicate, runpod
from contracts.job import JobState

GOLDEN = json.loads(
    (Path(__file__).parents[1] / "data" / "status_mapping_golden.json").read_text()
)
MODULES: dict[str, ModuleType] = {
    "cog": cog, "fal": fal, "runpod": runpod, "openai": openai, "replicate": replicate,
}


@pytest.mark.parametrize("kind", sorted(MODULES))
def test_table_matches_the_golden_file(kind: str):
    table = {raw: state.value for raw, state in MODULES[kind].STATUS_MAP.items()}
    assert table == GOLDEN[kind]


@pytest.mark.parametrize("kind", sorted(set(MODULES) - {"openai"}))
def test_an_unknown_status_never_ends_a_job(kind: str):
    assert MODULES[kind].map_status("SOMETHING_NEW") is JobState.RUNNING


def test_docs_show_every_raw_status():
    page = (Path(__file__).parents[2] / "docs" / "providers.md").read_text()
    for kind, table in GOLDEN.items():
        for raw in table:
            assert f"`{raw}`" in page, f"docs/providers.md does not list {kind} status {raw}"
