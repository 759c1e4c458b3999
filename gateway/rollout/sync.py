"""Route sync: every gateway process picks up route changes within about a second.

Each change of a route writes an audit row, so the newest audit id is the routes'
version (:mod:`gateway.store.routes`). This loop asks the store for that one number every
``interval_s`` (0.5 s by default) and reloads the specs only when it moved; a change
made in this process wakes the loop at once. Either way a change is live everywhere
well within 2 s, with no restart.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.rollout.router import Router
from gateway.store.routes import RouteBook

__all__ = ["RouteSync"]

log = logging.getLogger(__name__)


class RouteSync(Loop):
    """Keeps a :class:`gateway.rollout.router.Router` in step with the store's routes."""

    name = LoopName.ROUTES

    def __init__(
        self,
        *,
        book: RouteBook,
        router: Router,
        notifier: Notifier,
        interval_s: float,
        metrics: Metrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._book = book
        self._router = router
        self._metrics = metrics
        self._checked = -math.inf

    async def refresh_if_stale(self) -> None:
        """:meth:`run_once` when the last check is ``interval_s`` old (called on the create
        path and by the guard, so a change is picked up without a loop of its own)."""
        now = self._clock.monotonic()
        if now - self._checked >= self._interval_s:
            self._checked = now
            await self.run_once()

    async def run_once(self) -> int:
        """Reload when the store's version moved; 0 either way (then sleep the interval)."""
        if await self._book.version() == self._router.version:
            return 0
        await self.reload()
        return 0

    async def reload(self) -> list[str]:
        """Load every spec now; the names of the routes that changed come back."""
        version, specs = await self._book.load()
        changed = self._router.update(version, specs)
        for key in changed:
            spec = self._router.spec(key)
            log.info(
                "route_reloaded",
                extra={
                    "route": key,
                    "provider": spec.provider,
                    "candidate": spec.candidate,
                    "canary_percent": spec.canary_percent,
                    "shadow_percent": spec.shadow_percent,
                },
            )
        if self._metrics is not None:
            for key in self._router.keys:
                spec = self._router.spec(key)
                self._metrics.route_canary_percent.labels(key).set(spec.canary_percent)
                self._metrics.route_shadow_percent.labels(key).set(spec.shadow_percent)
        return changed


async def seed(book: RouteBook, router: Router, providers: Collection[str] | None = None) -> None:
    """Seed the store from the config file's routes and log which side wins where the
    file and the store differ (docs/canary.md, "Which wins"); ``providers``, the
    configured ones, make a stored spec naming another take the file's."""
    configured = {key: router.spec(key) for key in router.keys}
    for note in await book.seed(configured, providers):
        fields = ", ".join(note.differs)
        if note.outcome == "store_wins":
            log.warning(
                "route_config_ignored",
                extra={
                    "route": note.route,
                    "differs": fields,
                    "detail": "the store wins: the route was changed live since the file "
                    "last seeded it; change it with `cutover routes` or the admin API",
                },
            )
        elif note.outcome == "file_applied":
            log.warning(
                "route_config_applied",
                extra={
                    "route": note.route,
                    "differs": fields,
                    "detail": f"the file wins: the store's spec named provider(s) "
                    f"{', '.join(note.gone)}, no longer configured" if note.gone else
                    "the file wins: it changed and the route was not changed live",
                },
            )
        elif note.outcome == "unchanged" and note.differs:
            log.info(
                "route_live_state_kept",
                extra={
                    "route": note.route,
                    "differs": fields,
                    "detail": "the store wins: live changes since the file seeded it",
                },
            )
        elif note.outcome == "inserted":
            log.info("route_seeded", extra={"route": note.route})
