"""Outbound webhook delivery: the sending side of the outbox (docs/replicate-api.md §6).

:class:`gateway.store.outbox.Planner` writes one row per event in the transaction that changes
the job; :class:`Delivery` sends them. Each round it leases due rows and POSTs each one:

* **in order per prediction**: a row is only taken when no earlier row (lower id) of
  the same job is still ``pending`` (§6.3: sequential deliveries);
* **the stored bytes exactly** (compact JSON, §6.5), ``Content-Type: application/json``,
  ``User-Agent: cutover``, and Standard Webhooks headers (§6.4): ``webhook-id`` is the
  row's ``msg_id`` (the same on every retry), ``webhook-timestamp`` the time of this
  attempt, ``webhook-signature`` one ``v1,`` entry per secret in use;
* **through the SSRF guard** (:func:`gateway.webhooks.connector.connector`), redirects not followed,
  each attempt bounded by ``timeout_s``, at most ``max_concurrency`` at once (the HTTP side
  of an attempt, and the session, are :mod:`gateway.webhooks.post`).

Outcomes follow :func:`gateway.webhooks.attempt.decide`: 2xx ``delivered``; ``completed``
retried on the schedule, then ``dead``; non-terminal events ``dropped`` after one
failed attempt; an SSRF refusal ``dead`` at once. A 410 Gone makes the row ``dead`` and
disables its URL in ``endpoints``: the URL's other pending rows, and every later event
for it, go ``dead`` unsent until a replay re-enables it.

Operator webhook events (docs/webhooks.md, "Operator webhook": rows with no job, event
``operator``, written by :mod:`gateway.store.operatorhook`) go the same way, signed with
the operator secret, retried like ``completed``, and not ordered among themselves.

A non-terminal row is never sent once the job's ``completed`` event was delivered
(it becomes ``superseded``), so a replay cannot put a stale snapshot after the final one.
Claims are leases: on PostgreSQL ``FOR UPDATE SKIP LOCKED``, on SQLite the claim runs in
a ``BEGIN IMMEDIATE`` transaction. A lease outlives one attempt (``lease_s`` should be at
least ``timeout_s`` plus slack), so two processes never send the same row at once; a row
whose sender died is sent again after its lease ends, with the same ``webhook-id``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import aiohttp

from contracts.auth import DEFAULT_TENANT
from gateway import boundary, retry
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.loop import Loop
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.store.deliveries import Candidate, DeliveryQueue
from gateway.store.records import DeliveryStatus, OutboxRow
from gateway.webhooks import signing
from gateway.webhooks.attempt import Attempt, Decision, decide
from gateway.webhooks.post import USER_AGENT, log_outcome, post
from gateway.webhooks.post import host as _host
from gateway.webhooks.signers import TenantSigners

__all__ = ["Delivery"]

log = logging.getLogger(__name__)

STORE_EVERY_S = 1.0  # while no claim is made, the store is asked this often what waits there
STORE_EVERY = timedelta(seconds=STORE_EVERY_S)


# --- the loop -------------------------------------------------------------------------------


class Delivery(Loop):
    """Sends due outbox rows; see the module docstring.

    Parameters
    ----------
    queue : DeliveryQueue
        Claims rows and stores outcomes (its lease outlives one attempt's timeout).
    http : aiohttp.ClientSession
        From :func:`gateway.webhooks.post.open_session` (owned by the caller).
    signer : signing.Signer or TenantSigners
        Signs each attempt (with its prediction's tenant's secret: docs/security.md).
    operator_signer : signing.Signer, optional
        Signs operator webhook events (rows without a prediction, docs/webhooks.md
        "Operator webhook"): ``[operator_webhook]``'s secret. None (none configured): such
        a row goes ``dead`` unsent, and says why.
    schedule : retry.Schedule
        Retry delays of ``completed`` events.
    notifier : Notifier
        Wakes the loop (name ``delivery``) when events may be waiting.
    max_concurrency : int
        Attempts in flight at once.
    max_per_host : int, optional
        Attempts in flight at once to one receiving host, so that slow receivers cannot
        hold every slot and delay other apps' webhooks (default: ``max_concurrency``).
    interval_s : float
        Idle wait between rounds, in seconds.
    clock, rng
        Injected time and randomness (tests).
    metrics : Metrics, optional
        Counts attempts by event and outcome (delivered or failed).
    """

    name = LoopName.DELIVERY

    def __init__(
        self,
        *,
        queue: DeliveryQueue,
        http: aiohttp.ClientSession,
        signer: signing.Signer | TenantSigners,
        schedule: retry.Schedule,
        notifier: Notifier,
        max_concurrency: int,
        interval_s: float,
        max_per_host: int | None = None,
        operator_signer: signing.Signer | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(notifier=notifier, interval_s=interval_s, clock=clock)
        self._metrics = metrics
        self._queue = queue
        self._http = http
        self._signers = signer if isinstance(signer, TenantSigners) else TenantSigners(
            {DEFAULT_TENANT: signer})
        self._operator_signer = operator_signer
        self._schedule = schedule
        self._max_concurrency = max_concurrency
        self._max_per_host = max_per_host or max_concurrency
        self._min_claim = max(1, max_concurrency // 4)
        self._busy_hosts: Counter[str] = Counter()
        self._posting: set[int] = set()  # rows whose POST holds a host slot
        self._in_flight: set[asyncio.Task[None]] = set()
        self._reserved = 0  # slots taken for rows being written (gateway/store/handoff.py)
        self._backlog = False  # rows wait in the store: none handed over before they go
        self._retry_due: datetime | None = None  # the earliest retry this process scheduled
        self._store_due = datetime.min.replace(tzinfo=UTC)  # when the store is next asked
        self._unsent: list[OutboxRow] = []  # handed over once run() had ended
        self._running = False
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not security)

    async def run_once(self) -> int:
        """Claim up to ``max_concurrency`` due rows, attempt them all, wait for the outcomes.

        Returns the number of rows handled (sent, or settled without sending).
        """
        rows, settled = await self.claim(self._max_concurrency)
        await asyncio.gather(*(self._attempt_guarded(self._hold(row)) for row in rows))
        return len(rows) + settled

    async def run(self) -> None:
        """Deliver until :meth:`stop`, keeping up to ``max_concurrency`` attempts in flight.

        Unlike :meth:`Loop.run`, a round does not wait for its slowest receiver: a new
        claim is made whenever a slot frees up. On stop, attempts in progress finish
        (each is bounded by the session timeout) before this returns.
        """
        in_flight = self._in_flight
        self._running = True
        try:
            while not self._stopping.is_set():
                if await self._start_some(in_flight) == 0:
                    await self._idle(in_flight)
                else:  # let the attempts just scheduled start (a SQLite call need not yield)
                    await asyncio.sleep(0)
            self._running = False
            if in_flight:
                await asyncio.wait(in_flight)
        finally:
            self._running = False
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _start_some(self, in_flight: set[asyncio.Task[None]]) -> int:
        free = self._max_concurrency - len(in_flight) - self._reserved
        now = self._clock.now()
        try:
            # A claim per freed slot would be a transaction per delivery: while attempts
            # are in flight, claim once a quarter of the slots are free (docs/benchmarks.md).
            if free <= 0 or (in_flight and free < self._min_claim):
                await self._look_at_store(now)
                return 0
            self._store_due = now + STORE_EVERY
            rows, settled = await self.claim(free)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (the loop boundary: Outage logs it once)
            self._outage.failed(exc)
            return 0
        self._outage.succeeded()
        self._backlog = len(rows) + settled >= free  # a full claim: more may wait
        for row in rows:
            self._start(self._hold(row))
        return len(rows) + settled

    async def _look_at_store(self, now: datetime) -> None:
        """While no claim is made (the slots stay taken, each freed one by a row handed
        over), ask the store at most every :data:`STORE_EVERY_S` seconds whether a claim
        would take a row now: another process's retry, a dead process's row once its lease
        ended, a row that waited for an earlier one of its prediction. If one does, no row
        is handed over until a claim has taken what waits (:meth:`reserve`)."""
        if self._backlog or now < self._store_due:
            return
        self._store_due = now + STORE_EVERY
        if await self._queue.waiting(now):
            self._backlog = True

    def _start(self, row: OutboxRow) -> None:
        task = asyncio.create_task(self._attempt_guarded(row))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    # --- rows handed over by the transaction that wrote them (gateway/store/handoff.py) ---

    def reserve(self, url: str) -> bool:
        """Take a slot for a row to ``url`` if :meth:`run` has one free now (for its
        host too); the row is then written leased to this process."""
        host = _host(url)
        if not self._running or self._stopping.is_set():
            return False
        if self._retry_due is not None and self._clock.now() >= self._retry_due:
            self._retry_due, self._backlog = None, True  # a retry is due: it goes first
        if self._backlog or self._busy_hosts[host] >= self._max_per_host or (
            len(self._in_flight) + self._reserved >= self._max_concurrency
        ):  # the row waits in the store: until a claim takes what waits there, so must
            self._backlog = True  # every newer row, or a steady load would starve them
            return False
        self._busy_hosts[host] += 1
        self._reserved += 1
        return True

    def unreserve(self, url: str) -> None:
        """Give back a slot :meth:`reserve` took (the row's transaction failed)."""
        self._reserved -= 1
        self._release_host(_host(url))

    def hand(self, rows: list[OutboxRow]) -> None:
        """Attempt rows written leased to this process, each on a slot it reserved. Once
        :meth:`run` has ended (the transaction committed as the process stopped), none:
        they wait for :meth:`release_unsent`."""
        for row in rows:
            self._reserved -= 1
            if not self._running:
                self._release_host(_host(row.url))
                self._unsent.append(row)
                continue
            self._posting.add(row.id)
            self._start(row)

    async def release_unsent(self) -> int:
        """At a stop, once no loop writes any more: give back the rows handed over after
        :meth:`run` had ended, unattempted, so the next process sends them at once rather
        than once their lease (``lease_s`` + ``timeout_s``) has run out. Returns how many
        were given back; 0 when the store fails (their leases run out instead)."""
        rows, self._unsent = self._unsent, []
        if not rows:
            return 0
        return await self._queue.give_back([row.id for row in rows])

    async def _idle(self, in_flight: set[asyncio.Task[None]]) -> None:
        wait_s = self._interval_s if in_flight else await self._idle_or_interval()
        sleeper = asyncio.create_task(self._notifier.sleep(self.name, wait_s))
        try:
            await asyncio.wait({sleeper, *in_flight}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            await asyncio.gather(sleeper, return_exceptions=True)

    # --- claims ---------------------------------------------------------------------------

    async def claim(self, limit: int) -> tuple[list[OutboxRow], int]:
        """Lease up to ``limit`` deliverable rows.

        Rows for a disabled endpoint are marked ``dead`` and non-terminal rows of a job
        whose ``completed`` event was delivered are marked ``superseded`` instead.

        Returns
        -------
        tuple[list[OutboxRow], int]
            The leased rows (their ``attempts`` already counts this attempt), and how
            many rows were settled without sending.
        """
        return await self._queue.claim(limit, self._fair_share)

    def _fair_share(self, candidates: list[Candidate], limit: int) -> list[int]:
        """Up to ``limit`` row ids, oldest due first, at most ``max_per_host`` in flight
        per receiving host (counting the attempts this process already has running)."""
        busy = Counter(self._busy_hosts)
        chosen: list[int] = []
        for row in candidates:
            if len(chosen) == limit:
                break
            host = _host(row.url)
            if busy[host] >= self._max_per_host:
                continue
            busy[host] += 1
            chosen.append(row.id)
        return chosen

    # --- one attempt ------------------------------------------------------------------------

    def _hold(self, row: OutboxRow) -> OutboxRow:
        """Count ``row`` against its host's slots now, before its attempt is scheduled:
        the next claim may come before the attempt starts (a store call need not yield
        to the event loop), and must see the slot taken."""
        self._busy_hosts[_host(row.url)] += 1
        self._posting.add(row.id)
        return row

    async def _attempt_guarded(self, row: OutboxRow) -> None:
        """One attempt of a row :meth:`_hold` counted."""
        try:
            await self.attempt(row)
        except asyncio.CancelledError:
            raise
        except Exception:  # one attempt's boundary: the lease expires, the row comes back
            log.exception("webhook_attempt_crashed", extra={"job_id": row.job_id})
        finally:
            self._posted(row)

    def _posted(self, row: OutboxRow) -> None:
        """The POST of ``row`` is over: its host may take another while the outcome is
        recorded (a slot per host bounds requests in flight, not store writes)."""
        if row.id not in self._posting:
            return
        self._posting.discard(row.id)
        self._release_host(_host(row.url))

    def _release_host(self, host: str) -> None:
        self._busy_hosts[host] -= 1
        if self._busy_hosts[host] <= 0:
            del self._busy_hosts[host]
        self._notifier.wake(self.name)

    async def attempt(self, row: OutboxRow) -> Decision:
        """POST one leased row, record the outcome, and return the decision."""
        body = row.payload.encode("utf-8")
        signer = (await self._signers.signer_for(row.job_id) if row.job_id is not None
                  else self._operator_signer)
        if signer is None:  # an operator event, and no [operator_webhook] any more
            result = Attempt(error="not sent: no [operator_webhook] is configured")
            self._posted(row)
            ended = self._clock.now()
            decision = Decision(DeliveryStatus.DEAD, error=result.error)
        else:
            now = self._clock.now()
            headers = signer.headers(row.msg_id, int(now.timestamp()), body, now=now)
            headers.update({"Content-Type": "application/json", "User-Agent": USER_AGENT})
            result = await post(self._http, row.url, body, headers)
            self._posted(row)
            ended = self._clock.now()
            decision = decide(row.event, row.attempts, result, ended, self._schedule, self._rng)
        recorded = await self._record(row, result, decision, ended)
        log_outcome(row, result, decision, recorded)
        if self._metrics is not None:
            outcome = "delivered" if decision.status == DeliveryStatus.DELIVERED else "failed"
            self._metrics.webhook_deliveries.labels(row.event, outcome).inc()
        return decision

    async def _record(
        self, row: OutboxRow, result: Attempt, decision: Decision, now: datetime
    ) -> bool:
        """Store the outcome if this process still holds the lease; True if it did."""
        # The POST happened: record it through a blip in the store rather than send twice.
        recorded = await boundary.retry_store(
            lambda: self._queue.record(
                row.id,
                status=decision.status,
                next_attempt_at=decision.next_attempt_at,
                status_code=result.status_code,
                error=decision.error,
                now=now,
                disable_url=row.url if decision.disable_endpoint else None,
            )
        )
        if decision.disable_endpoint:
            log.warning("webhook_endpoint_disabled", extra={"host": _host(row.url)})
        retry = decision.next_attempt_at if decision.status == DeliveryStatus.PENDING else None
        if recorded and retry is not None:
            self._retry_due = retry if self._retry_due is None else min(self._retry_due, retry)
        return recorded

