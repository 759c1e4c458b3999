"""The app side of a chaos run: creates predictions, cancels some, waits for each to end.

Each prediction follows a :class:`Plan` drawn from the profile: which output it asks for,
whether it goes through the official ``replicate`` client or plain HTTP, a cancel after a
random delay, a ``Cancel-After`` deadline, an events filter, a receiver that fails for a
while. Plain-HTTP creates carry an ``Idempotency-Key`` and are retried through transport
errors and 5xx (a gateway being killed and restarted), so a retry never starts a second
job. Requests go to the gateways in turn, moving on when one does not answer.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from chaos.profile import FaultProfile

__all__ = ["TERMINAL", "VERSION", "Driver", "Plan", "Tracked"]

VERSION = "c4a05c0a11a2e1c5b0f3d5c0a9e8f7d6c5b4a3928170f6e5d4c3b2a190807060"
TERMINAL = frozenset({"succeeded", "failed", "canceled"})
_FILTERS: tuple[list[str] | None, ...] = (None, ["completed"], ["start", "output", "completed"])
_KINDS = ("text", "list", "file", "files")


@dataclass(frozen=True)
class Plan:
    """What the app does with one prediction."""

    index: int
    kind: str
    via_client: bool
    cancel_at_s: float | None
    cancel_after_s: float | None
    run_s: float | None
    events_filter: list[str] | None
    fail_s: float

    @classmethod
    def draw(cls, index: int, profile: FaultProfile, rng: random.Random) -> Plan:
        cancel_after = None
        run_s = None
        via_client = rng.random() < profile.client_ratio
        if rng.random() < profile.cancel_after_ratio and not via_client:  # a header it lacks
            cancel_after = rng.uniform(profile.cancel_after_min_s, profile.cancel_after_max_s)
            run_s = rng.uniform(0, profile.slow_run_max_s)
        cancel_at = None
        if rng.random() < profile.cancel_ratio:
            cancel_at = rng.uniform(0, profile.cancel_max_delay_s)
        failing = rng.random() < profile.receiver_failing_ratio
        return cls(
            index=index,
            kind=rng.choice(_KINDS),
            via_client=via_client,
            cancel_at_s=cancel_at,
            cancel_after_s=cancel_after,
            run_s=run_s,
            events_filter=rng.choice(_FILTERS),
            fail_s=profile.receiver_failing_s if failing else 0.0,
        )

    def input(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "seed": f"p{self.index}"}
        if self.run_s is not None:
            data["run_s"] = round(self.run_s, 3)
        return data


@dataclass
class Tracked:
    """One prediction as the app saw it."""

    plan: Plan
    prediction_id: str | None = None
    created_at: float = 0.0
    deadline_s: float = 0.0
    final: dict[str, Any] | None = None
    error: str | None = None
    cancels: int = 0
    gets: int = field(default=0)

    @property
    def time_to_terminal_s(self) -> float | None:
        if self.final is None or not self.final.get("completed_at"):
            return None
        created = datetime.fromisoformat(self.final["created_at"])
        return (datetime.fromisoformat(self.final["completed_at"]) - created).total_seconds()


class Driver:
    """Runs every plan against the gateways at ``urls``; see the module docstring."""

    def __init__(
        self, *, urls: list[str], token: str, hooks_url: str, profile: FaultProfile,
        rng: random.Random, retry_creates_s: float = 120.0, wait_slack_s: float = 10.0,
    ) -> None:
        self.urls = urls
        self._token = token
        self._hooks_url = hooks_url
        self._profile = profile
        self._rng = rng
        self._retry_creates_s = retry_creates_s
        self._wait_slack_s = wait_slack_s
        self._turn = 0
        self._http = httpx.AsyncClient(
            timeout=30.0, headers={"Authorization": f"Bearer {token}"},
            limits=httpx.Limits(max_connections=profile.in_flight * 2),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def run(self, count: int, run_id: str) -> list[Tracked]:
        """Create ``count`` predictions, at most ``in_flight`` at once; wait for each."""
        gate = asyncio.Semaphore(self._profile.in_flight)
        plans = [Plan.draw(i, self._profile, self._rng) for i in range(count)]
        tracked = [Tracked(plan=p) for p in plans]

        async def one(item: Tracked) -> None:
            async with gate:
                await self._lifecycle(item, run_id)

        await asyncio.gather(*(one(t) for t in tracked))
        return tracked

    async def _lifecycle(self, item: Tracked, run_id: str) -> None:
        plan = item.plan
        item.created_at = time.monotonic()
        grace = self._profile.cancel_grace_s + 15.0
        item.deadline_s = (
            plan.cancel_after_s + grace if plan.cancel_after_s else self._profile.terminal_within_s
        )
        try:
            item.prediction_id = await self._create(plan, run_id)
        except (httpx.HTTPError, RuntimeError) as exc:
            item.error = f"create failed: {exc}"
            return
        waiter = asyncio.create_task(self._wait(item))
        if plan.cancel_at_s is not None:
            await asyncio.sleep(plan.cancel_at_s)
            if not waiter.done():
                await self._cancel(item)
        await waiter

    def _next_url(self) -> str:
        self._turn += 1
        return self.urls[self._turn % len(self.urls)]

    def _body(self, plan: Plan) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": VERSION, "input": plan.input(),
            "webhook": f"{self._hooks_url}?fail_s={plan.fail_s}",
        }
        if plan.events_filter is not None:
            body["webhook_events_filter"] = plan.events_filter
        return body

    async def _create(self, plan: Plan, run_id: str) -> str:
        if plan.via_client:
            return await asyncio.to_thread(self._create_with_client, plan)
        headers = {"Idempotency-Key": f"chaos-{run_id}-{plan.index}"}
        if plan.cancel_after_s is not None:
            headers["Cancel-After"] = f"{plan.cancel_after_s:.3f}s"
        response = await self._retrying("POST", "/v1/predictions", self._retry_creates_s,
                                         json=self._body(plan), headers=headers)
        if response.status_code != 201:
            raise RuntimeError(f"create answered {response.status_code}: {response.text[:200]}")
        return str(response.json()["id"])

    def _create_with_client(self, plan: Plan) -> str:
        import replicate  # the official client: a dev/chaos dependency

        client = replicate.Client(api_token=self._token, base_url=self._next_url())
        body = self._body(plan)
        extra = {}
        if "webhook_events_filter" in body:
            extra["webhook_events_filter"] = body["webhook_events_filter"]
        try:
            prediction = client.predictions.create(
                version=VERSION, input=body["input"], webhook=body["webhook"], **extra
            )
        finally:  # one client per create: its lazily built httpx client is not thread-safe
            http = getattr(client, "_Client__client", None)  # the client's private httpx one
            if http is not None:
                http.close()
        return str(prediction.id)

    async def _cancel(self, item: Tracked) -> None:
        item.cancels += 1
        path = f"/v1/predictions/{item.prediction_id}/cancel"
        try:
            await self._retrying("POST", path, 30.0 + self._wait_slack_s)
        except httpx.HTTPError:
            item.error = "the cancel was never answered"

    async def _wait(self, item: Tracked) -> None:
        interval = 0.2
        path = f"/v1/predictions/{item.prediction_id}"
        end = item.created_at + item.deadline_s + self._wait_slack_s
        while time.monotonic() < end:
            try:
                response = await self._retrying("GET", path, max(end - time.monotonic(), 1.0))
            except httpx.HTTPError as exc:
                item.error = f"the gateway did not answer until the deadline ({exc!r})"
                return
            item.gets += 1
            if response.status_code == 200:
                body = response.json()
                if body.get("status") in TERMINAL:
                    item.final = body
                    return
                item.final = None
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, 2.0)
        item.error = item.error or "no terminal state seen before the deadline"

    async def _retrying(
        self, method: str, path: str, budget_s: float, **kwargs: Any
    ) -> httpx.Response:
        """One request, retried on transport errors and 5xx across gateways for ``budget_s``."""
        end = time.monotonic() + budget_s
        delay = 0.1
        while True:
            try:
                response = await self._http.request(method, self._next_url() + path, **kwargs)
            except httpx.TransportError:
                if time.monotonic() >= end:
                    raise
            else:
                if response.status_code < 500 or time.monotonic() >= end:
                    return response
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
