"""The canary and shadow services of one gateway process, built together (docs/canary.md).

:func:`open_routes` seeds the store's routes from the config file, loads the live specs
into the router, and returns every piece the app, its admin endpoints and its loops use:
the route book, the route control, the route sync and guard loops, the shadow store, the
shadow comparisons, the dispatcher's shadow gate, and the replays of recorded inputs
(their control and loop, docs/cutover-day.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.metrics import Metrics
from gateway.notify import Notifier
from gateway.rollout.control import RouteControl
from gateway.rollout.guardloop import Guard
from gateway.rollout.replay import ReplayControl, Replayer
from gateway.rollout.router import Router
from gateway.rollout.shadowgate import ShadowGate
from gateway.rollout.shadowpairs import ShadowComparisons
from gateway.rollout.sync import RouteSync, seed
from gateway.storage import Storage
from gateway.store.engine.db import Engine
from gateway.store.operatorhook import OperatorOutbox
from gateway.store.replays import ReplayStore
from gateway.store.routes import RouteBook
from gateway.store.shadows import ShadowStore

__all__ = ["RouteServices", "open_routes"]


@dataclass(frozen=True)
class RouteServices:
    """Everything routes-as-data and shadows need in one process."""

    book: RouteBook
    control: RouteControl
    sync: RouteSync
    shadows: ShadowStore
    pairs: ShadowComparisons
    router: Router
    notifier: Notifier
    metrics: Metrics
    replay: ReplayControl
    clock: Clock = SYSTEM_CLOCK

    def shadow_gate(self) -> ShadowGate:
        """The dispatcher's shadow budget check."""
        return ShadowGate(shadows=self.shadows, router=self.router, metrics=self.metrics,
                          clock=self.clock)

    def loops(self, *, guard_interval_s: float, owner: str, lease_s: float,
              interval_s: float) -> list[Loop]:
        """The canary guard loop and the replay loop (``owner``: this process's lease
        owner; ``lease_s``: how long it holds a replay; ``interval_s``: its pace while
        one runs)."""
        guard = Guard(book=self.book, router=self.router, notifier=self.notifier,
                      interval_s=guard_interval_s, metrics=self.metrics,
                      pair_stats=self.pairs.pair_stats, refresh=self.sync.refresh_if_stale,
                      reload=self.sync.reload, clock=self.clock)
        replayer = Replayer(replays=self.replay.replays, shadows=self.shadows,
                            router=self.router, notifier=self.notifier, owner=owner,
                            lease_s=lease_s, interval_s=interval_s, clock=self.clock)
        return [guard, replayer]


async def open_routes(
    engine: Engine,
    router: Router,
    notifier: Notifier,
    metrics: Metrics,
    storage: Storage,
    *,
    providers: Collection[str],
    public_url: str,
    poll_interval_s: float,
    clock: Clock = SYSTEM_CLOCK,
    operator: OperatorOutbox | None = None,
) -> RouteServices:
    """Seed the store from the file, load the live specs, and build the services.

    ``providers`` are the configured provider names (a route change naming another is
    refused), ``public_url`` the gateway's, ``poll_interval_s`` how often the route
    version is read (``[gateway] route_poll_interval_s``), ``operator`` where live
    changes are announced (``[operator_webhook]``, docs/webhooks.md).
    """
    book = RouteBook(engine, clock=clock, target_of=router.target, notifier=notifier,
                     operator=operator)
    control = RouteControl(book, routes=router.keys, providers=providers, clock=clock)
    shadows = ShadowStore(engine, clock=clock)
    sync = RouteSync(book=book, router=router, notifier=notifier,
                     interval_s=poll_interval_s, metrics=metrics, clock=clock)
    await seed(book, router, providers)
    await sync.reload()
    return RouteServices(
        book=book,
        control=control,
        sync=sync,
        shadows=shadows,
        pairs=ShadowComparisons(shadows, storage, public_url=public_url),
        router=router,
        notifier=notifier,
        metrics=metrics,
        replay=ReplayControl(ReplayStore(engine, clock=clock), router, control.spec,
                             notifier=notifier, clock=clock),
        clock=clock,
    )
