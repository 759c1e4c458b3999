"""The dispatcher's claim through ``sqlite3`` (gateway/store/dispatching.py) leases what
the engine's claim leases: the same jobs, in the same order, with the same lease, status
and fairness, whether every waiting job fits or the window function chooses."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from gateway.fairness import Candidate, fair_order
from gateway.store.schema import jobs
from tests.support.gateway import VERSION, GatewayHarness

TOKENS = {"a": "r8_token_of_a", "b": "r8_token_of_b"}
LEASED = (jobs.c.id, jobs.c.lease_owner, jobs.c.leased_until, jobs.c.raw_status)


async def _leases(gateway: GatewayHarness) -> dict[str, tuple[Any, ...]]:
    async with gateway.store.engine.read() as conn:
        rows = await conn.execute(sa.select(*LEASED).where(jobs.c.lease_owner.is_not(None)))
        return {row.id: tuple(row) for row in rows}


async def _claim(gateway: GatewayHarness, limit: int) -> tuple[list[Any], list[str]]:
    served: dict[str, float] = {}
    chosen: list[str] = []

    def order(candidates: list[Candidate], most: int) -> list[Candidate]:
        picked = fair_order(candidates, served, most)
        chosen.extend(c.id for c in picked)
        return picked

    claimed = await gateway.store.claim_dispatch("fake", limit, order, lost_is_idle=True)
    return claimed, chosen


async def _round(gateway: GatewayHarness, limit: int) -> tuple[Any, ...]:
    before = gateway.clock.now() + gateway.store._lease_length
    claimed, chosen = await _claim(gateway, limit)
    ids = [job.id for job in claimed]
    after = gateway.clock.now() + gateway.store._lease_length
    tokens = {job_id: gateway.store.claimed_token(job_id) for job_id in ids}
    leases = {}
    for job_id, (_, owner, until, raw_status) in (await _leases(gateway)).items():
        assert before <= until <= after
        leases[job_id] = (owner, raw_status)
    for job_id in ids:
        await gateway.store.release(job_id, next_attempt_at=None)
    async with gateway.store.engine.begin() as conn:  # never claimed: the next round's alike
        await conn.execute(jobs.update().values(raw_status=None))
    return ids, chosen, tokens, leases, [job.model_dump() for job in claimed]


@pytest.mark.parametrize(("limit", "claimed"), [(5, 4), (3, 3)])
async def test_the_sqlite3_claim_leases_what_the_engine_claims(
    make_gateway: Any, limit: int, claimed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All four waiting jobs fit, or not (each token's first by the window function)."""
    gateway = await make_gateway(
        gateway={"api_tokens": [], "named_api_tokens": TOKENS},
    )
    body = {"version": VERSION, "input": {"prompt": "x"}}
    for token in ("a", "a", "a", "b"):
        await gateway.create(body, Authorization=f"Bearer {TOKENS[token]}")
    store = gateway.store
    through_engine: list[int] = []
    engine_round = store._claim_engine

    def counted(*args: Any) -> Any:
        through_engine.append(1)
        return engine_round(*args)

    monkeypatch.setattr(store, "_claim_engine", counted)
    fast = await _round(gateway, limit)
    assert through_engine == []  # the sqlite3 round, window function or not
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731 (forces the engine)
    event.listen(gateway.store.engine.sync_engine, "before_cursor_execute", listener)
    try:
        engine = await _round(gateway, limit)
    finally:
        event.remove(gateway.store.engine.sync_engine, "before_cursor_execute", listener)
    assert any(s.startswith("UPDATE jobs SET raw_status") for s in statements)
    assert fast == engine
    assert len(fast[0]) == claimed
    assert fast[1] == fast[0]  # the fair order's choice, in its order
