"""A create's row written through ``sqlite3`` on a SQLite file (gateway/store/creates.py)
is the row the engine would write: the job the create answered is the job a read returns,
JSON input, unicode and times included; a large input goes through the engine."""

from __future__ import annotations

import pytest

from gateway.http import keys
from tests.support.gateway import VERSION, GatewayHarness


async def test_a_create_through_sqlite3_reads_back_as_answered(gateway: GatewayHarness) -> None:
    batcher = gateway.app[keys.PREDICTIONS]._creates
    body = {"version": VERSION, "input": {"prompt": "h\u00e9llo \u2603", "n": [1, 2.5, None],
                                          "nested": {"b": True}}}
    created = await gateway.create(body)
    if batcher._fast is None or batcher._fast._path is None:
        pytest.skip("the sqlite3 path is SQLite's")
    assert batcher._fast._conn is not None  # the insert ran through it
    stored = await gateway.store.get(created["id"])
    assert stored.input == body["input"]
    assert stored.created_at.isoformat().replace("+00:00", "Z") == created["created_at"]


async def test_a_large_input_is_stored_whole(gateway: GatewayHarness) -> None:
    prompt = "x" * (200 * 1024)  # beyond what sqlite3 copies on the event loop
    created = await gateway.create({"version": VERSION, "input": {"prompt": prompt}})
    assert (await gateway.store.get(created["id"])).input == {"prompt": prompt}
