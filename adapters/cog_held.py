"""Cog's synchronous predictions, held open: a Cog provider without webhooks (docs/cog.md §3).

coglet 0.23.1 spends about 5 ms on every prediction that carries a ``webhook``, sent or
not (docs/cog.md §3, measured). With ``held = true`` the gateway sends each prediction
as Cog's synchronous request instead, ``PUT /predictions/{job id}`` with no webhook and
no ``Prefer: respond-async``, and holds the request open until Cog answers with the
result. What changes against the webhook path:

- :meth:`HeldCogAdapter.submit` waits up to :data:`ANSWER_WINDOW_S` for the answer: a
  fast prediction's result, or Cog's busy (409), refusal (422) or a connection failure,
  returns as a submit's answer and the dispatcher applies it as for any provider. A
  prediction still running then stays held by this process and is reported ``processing``;
  its answer is handed to the gateway when it comes (:meth:`HeldCogAdapter.attach_answers`, the
  provider webhook intake without its HTTP), and kept for the next :meth:`fetch` if that
  hand-over fails.
- While held, no output or ``logs`` events arrive: pollers see ``processing`` with no logs
  until the watchdog probe (:meth:`CogAdapter.fetch`, every ``fetch_interval_s``) reads the
  prediction's progress and logs, then the result.
- A held request outlives nothing: a gateway that stops waits up to :data:`DRAIN_S` for
  the predictions it holds; one still held then (or at a crash) loses its answer. Cog
  goes on running it and forgets it once done; the next probe then finds it forgotten
  and, after ``lost_grace_s`` (:data:`HELD_LOST_GRACE_S`: no webhook will ever come),
  the job fails as lost.
- A cancel is Cog's ``POST /predictions/{id}/cancel``; the held request then answers
  ``canceled``, which ends the job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters import aiotransport, cog_wire
from adapters.cog import CogAdapter, prediction_path
from contracts.errors import CutoverError, ProviderBusy, UpstreamRejected
from contracts.job import JobState
from contracts.snapshot import ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["ANSWER_WINDOW_S", "DRAIN_S", "HELD_LOST_GRACE_S", "Deliver", "HeldCogAdapter"]

#: How long a submit waits for Cog's answer before leaving the prediction held, in
#: seconds: Cog's busy and refusal answers take 2-3 ms; the dispatcher's round waits this
#: long at most for a slow one.
ANSWER_WINDOW_S = 0.05
#: No webhook comes after a forgotten held prediction: a short grace covers only the
#: moment between Cog's answer and its being applied.
HELD_LOST_GRACE_S = 10.0
#: How long a stopping gateway waits for its held predictions, in seconds.
DRAIN_S = 10.0
_BUSY_FIRST_S, _BUSY_MAX_S = 0.1, 5.0  # a held call refused as busy: sent again after

#: Hands a held prediction's answer (Cog's prediction JSON, as bytes) to the gateway for
#: job ``job_id``; raises when it could not be stored.
Deliver = Callable[[str, bytes], Awaitable[object]]

log = logging.getLogger(__name__)


@dataclass
class _Call:
    """One prediction held by this process."""

    job_id: str
    task: asyncio.Task[None] | None = None
    busy: bool = False  # Cog refused it as busy: not running there, sent again later
    answer: bytes | None = None  # the result, until handed over
    snapshot: ProviderSnapshot | None = field(default=None, repr=False)


class HeldCogAdapter(CogAdapter):
    """:class:`CogAdapter` with synchronous, held predictions (module docstring).

    Takes :class:`CogAdapter`'s parameters; ``lost_grace_s`` defaults to
    :data:`HELD_LOST_GRACE_S`. ``capabilities.webhooks`` is False: the dispatcher gives
    no callback URL, and Cog is never asked for a webhook.
    """

    def __init__(self, *, lost_grace_s: float = HELD_LOST_GRACE_S, **options: Any) -> None:
        super().__init__(lost_grace_s=lost_grace_s, **options)
        self.capabilities = self.capabilities.model_copy(update={"webhooks": False})
        self._calls: dict[str, _Call] = {}
        self._deliver: Deliver | None = None
        # the synchronous PUT: no Prefer header; Cog answers when the prediction ends
        self._held_headers = [h for h in self._put_headers if h[0] != "Prefer"]
        self._held_limits = httpx.Timeout(self._timeout_s, read=None)
        self._rng = random.Random()  # noqa: S311 (jitter, not security)

    def attach_answers(self, deliver: Deliver) -> None:
        """Where held answers go once :meth:`submit` has returned (the gateway's intake)."""
        self._deliver = deliver

    async def aclose(self) -> None:
        """Wait up to :data:`DRAIN_S` for the held predictions to end and their answers
        to be handed over (the gateway stops: its loops have stopped sending), then drop
        the rest (Cog goes on; their answers are lost), then close the client."""
        tasks = [c.task for c in self._calls.values() if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=DRAIN_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._calls.clear()
        await super().aclose()

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Send the synchronous ``PUT`` and wait up to :data:`ANSWER_WINDOW_S` for it.

        Returns
        -------
        ProviderSnapshot
            The result (terminal) when Cog answered within the window; else ``RUNNING``
            (raw ``processing``), the prediction held. A retried submit of a job held
            here answers ``RUNNING`` without sending again.

        Raises
        ------
        ProviderBusy, UpstreamRejected, UpstreamRetryable
            As :meth:`CogAdapter.submit`, for an answer within the window.
        """
        job_id = request.job_id
        if job_id in self._calls:
            return _processing(job_id)
        body = aiotransport.json_body({"id": job_id, "input": request.input})
        first = asyncio.ensure_future(self._send(job_id, body))
        try:
            await asyncio.wait((first,), timeout=ANSWER_WINDOW_S)
        except asyncio.CancelledError:
            first.cancel()
            raise
        if first.done():
            response = first.result()
            cog_wire.raise_for_status(self.name, "submit", response)
            return cog_wire.prediction(self.name, response).snapshot()
        call = self._calls[job_id] = _Call(job_id)
        call.task = asyncio.create_task(self._hold(call, first, body), name=f"cog-held:{job_id}")
        return _processing(job_id)

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """The watchdog probe of :meth:`CogAdapter.fetch`, knowing what this process holds:
        an answer not yet handed over is returned as it is; a call Cog refused as busy is
        ``starting`` (Cog has nothing to probe); a held prediction the probe finds
        forgotten is ending now (its answer is on its way): ``processing``."""
        call = self._calls.get(ref.provider_job_id)
        if call is None:
            return await super().fetch(ref)
        if call.snapshot is not None:
            self._calls.pop(call.job_id, None)
            return call.snapshot
        if call.busy:
            return _starting(call.job_id)
        snapshot = await super().fetch(ref)
        return _processing(call.job_id) if snapshot.lost else snapshot

    async def cancel(self, ref: ProviderRef) -> bool:
        """Cog's cancel (:meth:`CogAdapter.cancel`): the held request then answers
        ``canceled``. A call waiting to be sent again after a busy answer is dropped and
        reported ``canceled`` at once (Cog never had it)."""
        call = self._calls.get(ref.provider_job_id)
        if call is not None and call.busy and call.task is not None:
            call.task.cancel()
            await asyncio.gather(call.task, return_exceptions=True)
            await self._hand_over(call, _body(call.job_id, "canceled"))
            return True
        return await super().cancel(ref)

    # --- the held request -----------------------------------------------------------------

    async def _send(self, job_id: str, body: bytes) -> httpx.Response:
        with self._errors("put", job_id):
            return await aiotransport.send(
                self._transport, "PUT", self._base_url + prediction_path(job_id), content=body,
                headers=self._held_headers, limits=self._held_limits,
            )

    async def _hold(self, call: _Call, first: asyncio.Future[httpx.Response],
                    body: bytes) -> None:
        """Wait for Cog's answer; send again after a busy one; hand the result over.
        A transport failure forgets the call: the watchdog probe decides (the prediction
        may still run at Cog, or Cog may have restarted)."""
        pending: Awaitable[httpx.Response] = first
        delay = _BUSY_FIRST_S
        while True:
            try:
                response = await pending
                cog_wire.raise_for_status(self.name, "submit", response)
                cog_wire.prediction(self.name, response)
            except ProviderBusy as exc:
                call.busy = True
                await asyncio.sleep(max(delay * self._rng.random(), exc.retry_after_s or 0.0))
                delay = min(delay * 2, _BUSY_MAX_S)
                call.busy = False
                pending = self._send(call.job_id, body)
                continue
            except UpstreamRejected as exc:
                await self._hand_over(call, _body(call.job_id, "failed", exc.detail))
                return
            except CutoverError as exc:
                log.warning("cog_held_request_failed", extra={
                    "job_id": call.job_id, "provider": self.name, "error": exc.detail})
                self._calls.pop(call.job_id, None)
                return
            await self._hand_over(call, response.content)
            return

    async def _hand_over(self, call: _Call, answer: bytes) -> None:
        """Give ``answer`` to the gateway; kept for :meth:`fetch` if that fails."""
        call.answer = answer
        call.snapshot = self.parse_webhook(answer)
        if self._deliver is None:
            return
        try:
            await self._deliver(call.job_id, answer)
        except Exception as exc:  # noqa: BLE001 (kept: the next probe returns it)
            log.warning("cog_held_answer_kept", extra={
                "job_id": call.job_id, "provider": self.name, "error": repr(exc)})
            return
        self._calls.pop(call.job_id, None)


def _starting(job_id: str) -> ProviderSnapshot:
    return ProviderSnapshot(provider_job_id=job_id, state=JobState.QUEUED, raw_status="starting")


def _processing(job_id: str) -> ProviderSnapshot:
    """A held prediction Cog neither refused nor finished within the window: it runs
    (Cog's busy and refusal answers come within milliseconds)."""
    return ProviderSnapshot(provider_job_id=job_id, state=JobState.RUNNING,
                            raw_status="processing")


def _body(job_id: str, status: str, error: str | None = None) -> bytes:
    """A Cog prediction body for an answer the gateway writes itself."""
    return json.dumps({"id": job_id, "status": status, "error": error}).encode()
