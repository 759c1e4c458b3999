"""A submit wakes an idle poller when the job's first poll falls due before it would wake.

With nothing scheduled the poller sleeps ``loop_max_idle_s`` (10 s by default), and a
submit used not to wake it: a job's first poll could come that much late. The dispatcher
now tells the notifier when the first check falls due (``Notifier.due``), which wakes
the poller only when it sleeps past that time. The loops run for real here.
"""

from __future__ import annotations

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
FETCH_INTERVAL_S = 0.5


async def test_a_submit_wakes_the_idle_poller_for_the_jobs_first_poll(
    make_settings: Callable[..., Settings], aiohttp_client: Callable[..., Any],
) -> None:
    settings = make_settings(
        gateway={"loop_max_idle_s": MAX_IDLE_S},
        providers={"fake": {"kind": "fake", "fetch_interval_s": FETCH_INTERVAL_S}},
    )
    app = create_app(settings)  # the background loops run
    client = await aiohttp_client(app)
    notifier = app[keys.NOTIFIER]
    await wait_until(lambda: notifier.sleeping_until(LoopName.POLLER),
                     what="the poller asleep with nothing scheduled")
    response = await client.post("/v1/predictions", headers={"Authorization": f"Bearer {TOKEN}"},
                                 json={"version": VERSION, "input": {"prompt": "x"}})
    assert response.status == 201, await response.text()
    fake = app[keys.PROVIDERS]["fake"].adapter
    assert isinstance(fake, FakeAdapter)
    await wait_until(lambda: fake.submitted, what="the submit")
    submitted = time.monotonic()
    await wait_until(lambda: fake.fetch_calls, timeout_s=MAX_IDLE_S / 4,
                     what="the first poll, well before loop_max_idle_s")
    assert time.monotonic() - submitted < MAX_IDLE_S / 4
