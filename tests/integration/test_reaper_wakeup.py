"""The idle reaper is woken for work that falls due before it would wake by itself.

With nothing scheduled the reaper sleeps ``loop_max_idle_s`` (10 s by default) and only a
cancel request woke it: a prediction created meanwhile with a ``Cancel-After`` deadline
ended up to that much after its deadline (and the dispatcher, seeing the job due, went
round every ``loop_interval_s`` meanwhile). The loops run for real here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from adapters.fake import FakeAdapter
from gateway.app import create_app
from gateway.config import Settings
from gateway.http import keys
from gateway.notify import LoopName
from tests.support.gateway import TOKEN, VERSION
from tests.support.waiting import wait_until

MAX_IDLE_S = 60.0
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


async def _running_app(settings: Settings, aiohttp_client: Callable[..., Any]) -> Any:
    app = create_app(settings)  # the background loops run
    client = await aiohttp_client(app)
    await wait_until(lambda: app[keys.NOTIFIER].sleeping_until(LoopName.REAPER),
                     what="the reaper asleep with nothing scheduled")
    return app, client


async def test_a_deadline_wakes_the_idle_reaper(
    make_settings: Callable[..., Settings], aiohttp_client: Callable[..., Any],
) -> None:
    app, client = await _running_app(
        make_settings(gateway={"loop_max_idle_s": MAX_IDLE_S}), aiohttp_client
    )
    fake = app[keys.PROVIDERS]["fake"].adapter
    assert isinstance(fake, FakeAdapter)
    fake.busy_times = 10**6  # it never takes the job: only the deadline can end it
    response = await client.post("/v1/predictions", headers={**HEADERS, "Cancel-After": "5s"},
                                 json={"version": VERSION, "input": {"prompt": "x"}})
    assert response.status == 201, await response.text()
    created = time.monotonic()
    url = f"/v1/predictions/{(await response.json())['id']}"

    async def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = await (await client.get(url, headers=HEADERS)).json()
        return body if body["status"] != "starting" else None

    done = await wait_until(ended, timeout_s=MAX_IDLE_S / 2, interval_s=0.05,
                            what="the prediction ended by its deadline")
    assert done["status"] == "canceled"
    assert "passed its deadline" in done["error"]
    assert time.monotonic() - created < 5 + 3  # at the deadline, not at loop_max_idle_s


async def test_a_waiting_shadow_is_dropped_when_its_max_wait_runs_out(
    make_settings: Callable[..., Settings], aiohttp_client: Callable[..., Any],
) -> None:
    from gateway.rollout.shadowgate import WAITED
    from tests.integration.test_shadow_runs import _sections

    max_wait_s = 1.0
    sections = _sections(shadow_budget={"max_concurrent": 5, "max_per_hour": 100,
                                        "max_wait_s": max_wait_s})
    app, client = await _running_app(
        make_settings(gateway={"loop_max_idle_s": MAX_IDLE_S}, **sections), aiohttp_client
    )
    candidate = app[keys.PROVIDERS]["fake2"].adapter
    assert isinstance(candidate, FakeAdapter)
    candidate.busy_times = 10**6  # at capacity for good: the shadow waits at the gateway
    response = await client.post("/v1/predictions", headers=HEADERS,
                                 json={"version": VERSION, "input": {"prompt": "x", "n": 1}})
    assert response.status == 201, await response.text()
    created = time.monotonic()
    store = app[keys.STORE]
    primary = (await response.json())["id"]

    async def dropped() -> Any:
        shadows = await app[keys.ROUTES].shadows.shadows_of(primary)
        return shadows if shadows and shadows[0].state.terminal else None

    (shadow,) = await wait_until(dropped, timeout_s=MAX_IDLE_S / 2, interval_s=0.05,
                                 what="the shadow dropped")
    assert (await store.get(shadow.id)).error == WAITED
    assert time.monotonic() - created < max_wait_s + 3  # not at loop_max_idle_s


async def test_a_cancel_made_while_the_submit_was_in_flight_reaches_the_provider_at_once(
    make_settings: Callable[..., Settings], aiohttp_client: Callable[..., Any],
) -> None:
    # Found by hand with the replicate client (create, then cancel at once, on a real Cog
    # server): the cancel landed while the dispatcher's submit was in flight, so the
    # reaper, woken by it, found nothing submitted to cancel and went back to sleep
    # until the cancel grace; the 4-second prediction ran to "succeeded".
    app, client = await _running_app(
        make_settings(gateway={"loop_max_idle_s": MAX_IDLE_S}), aiohttp_client
    )
    fake = app[keys.PROVIDERS]["fake"].adapter
    assert isinstance(fake, FakeAdapter)
    submitting, release = asyncio.Event(), asyncio.Event()
    submit = fake.submit

    async def held(request: Any) -> Any:
        submitting.set()
        await release.wait()
        return await submit(request)

    fake.submit = held  # type: ignore[method-assign]
    response = await client.post("/v1/predictions", headers=HEADERS,
                                 json={"version": VERSION, "input": {"prompt": "x"}})
    assert response.status == 201, await response.text()
    job_id = (await response.json())["id"]
    await asyncio.wait_for(submitting.wait(), MAX_IDLE_S / 2)
    notifier = app[keys.NOTIFIER]
    asleep = await wait_until(lambda: notifier.sleeping_until(LoopName.REAPER),
                              what="the reaper asleep before the cancel")
    cancel = await client.post(f"/v1/predictions/{job_id}/cancel", headers=HEADERS)
    assert cancel.status == 200

    def asleep_again() -> bool:  # woken by the cancel, it found nothing submitted to send
        until = notifier.sleeping_until(LoopName.REAPER)
        return until is not None and until != asleep

    await wait_until(asleep_again, timeout_s=MAX_IDLE_S / 2,
                     what="the reaper's round after the cancel")
    release.set()
    asked = time.monotonic()
    await wait_until(lambda: fake.provider_job_id(job_id) in fake.cancel_calls,
                     timeout_s=MAX_IDLE_S / 2, interval_s=0.05,
                     what="the provider told to cancel")
    assert time.monotonic() - asked < 3  # not at the cancel grace (30 s) or loop_max_idle_s
