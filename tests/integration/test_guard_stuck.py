"""The guard and a candidate that never takes the work (docs/canary.md, "Guard"): its
predictions still not submitted ``max_queue_s`` after their create count as failed."""

from __future__ import annotations

from typing import Any

from gateway.app import LOOPS
from gateway.dispatcher import NOT_CONNECTED, Dispatcher
from gateway.rollout.guardloop import Guard
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.waiting import wait_until

ROUTE = f"acme/echo:{VERSION}"
ADMIN_TOKEN = "adm_guard_stuck_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GUARD = {"max_error_rate": 0.3, "min_samples": 5, "window_s": 600, "max_queue_s": 5}


def _sections(candidate: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": {"fake": {"kind": "fake"}, "next": candidate},
        "routes": [{"model": "acme/echo", "version": VERSION, "provider": "fake",
                    "candidate": "next", "guard": GUARD}],
        "admin": {"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]},
    }


async def _admin(gateway: GatewayHarness, method: str, path: str, **kwargs: Any) -> Any:
    response = await gateway.client.request(method, f"/admin{path}", headers=ADMIN, **kwargs)
    assert response.status == 200, await response.text()
    return await response.json()


async def _create_all(gateway: GatewayHarness, n: int) -> list[str]:
    body = {"version": VERSION, "input": {"prompt": "x"}}
    return [(await gateway.create(body))["id"] for _ in range(n)]


async def _tried(gateway: GatewayHarness, made: list[str]) -> None:
    """Dispatch rounds until every one of ``made`` has had a submit fail (the dead
    candidate is retried forever, so :meth:`GatewayHarness.settle` never ends)."""
    dispatcher = next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Dispatcher))

    async def failed_once() -> bool:
        await dispatcher.run_once()
        statuses = [(await gateway.store.get(x)).raw_status for x in made]
        return statuses == [NOT_CONNECTED] * len(made)

    await wait_until(failed_once, 10.0, what="a failed submit of every create")


async def _stuck_gauge(gateway: GatewayHarness) -> float | None:
    """``cutover_guard_stuck_predictions{route}`` as /metrics shows it (None: absent)."""
    text = await (await gateway.client.get("/metrics")).text()
    series = f'cutover_guard_stuck_predictions{{route="{ROUTE}"}} '
    values = [float(line[len(series):]) for line in text.splitlines() if line.startswith(series)]
    return values[0] if values else None


def _guard(gateway: GatewayHarness) -> Guard:
    return next(loop for loop in gateway.app[LOOPS] if isinstance(loop, Guard))


async def test_a_candidate_refusing_connections_is_rolled_back_once_enough_are_stuck(
    make_gateway: Any,
) -> None:
    dead = {"kind": "cog", "base_url": "http://127.0.0.1:1", "max_concurrency": 10}  # nothing
    # listens there; 10 slots: every round tries every create
    gateway = await make_gateway(**_sections(dead))
    await _admin(gateway, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    stuck = await _create_all(gateway, 4)
    await _tried(gateway, stuck)
    gateway.clock.advance(6)  # past max_queue_s
    assert await _guard(gateway).run_once() == 0  # 4 stuck: fewer than min_samples
    shown = await _admin(gateway, "GET", f"/routes/{ROUTE}")
    assert shown["arms"]["candidate"]["stuck"] == 4
    assert shown["arms"]["candidate"]["count"] == 0  # none finished
    assert await _stuck_gauge(gateway) == 4  # the figure the guard judged, for alerts
    stuck += await _create_all(gateway, 1)
    await _tried(gateway, stuck)
    assert await _guard(gateway).run_once() == 0  # the fifth is not old enough yet
    gateway.clock.advance(6)
    assert await _guard(gateway).run_once() == 1
    assert await _stuck_gauge(gateway) == 5  # the round that rolled back
    shown = await _admin(gateway, "GET", f"/routes/{ROUTE}")
    assert shown["spec"]["canary_percent"] == 0
    last = shown["changes"][0]
    assert (last["who"], last["action"]) == ("guard", "rollback")
    assert last["reason"] == (
        "candidate error rate 100.0% > 30.0% (5 of 5; 5 not taken by the provider "
        "within 5 s)"
    )
    assert last["evidence"]["candidate"]["stuck"] == 5
    for job_id in stuck:  # never moved: they stay the candidate's until it answers or expire
        assert (await _admin(gateway, "GET", f"/predictions/{job_id}"))["provider"] == "next"
        assert (await gateway.get(job_id))["status"] == "starting"
    gateway.clock.advance(6)
    assert await _guard(gateway).run_once() == 0
    assert await _stuck_gauge(gateway) == 0  # counted from the rollback on: the alert clears


async def test_a_healthy_candidate_queueing_at_its_max_concurrency_is_not_stuck(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(**_sections({"kind": "fake", "max_concurrency": 1}))
    await _admin(gateway, "POST", f"/routes/{ROUTE}/canary", json={"percent": 100, "reason": "go"})
    await _create_all(gateway, 6)  # one runs there, five wait for its slot
    await gateway.settle()
    gateway.clock.advance(60)
    assert await _guard(gateway).run_once() == 0
    shown = await _admin(gateway, "GET", f"/routes/{ROUTE}")
    assert shown["arms"]["candidate"]["stuck"] == 0
    assert await _stuck_gauge(gateway) == 0
    assert shown["spec"]["canary_percent"] == 100
