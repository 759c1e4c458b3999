"""Adapter for OpenAI-compatible servers, called synchronously and wrapped as jobs.

An OpenAI-compatible server (OpenAI, vLLM, TGI, llama.cpp...) has no job to poll, no
cancel and no webhook (docs/providers.md, "OpenAI-compatible"). So the adapter *holds*
the call: :meth:`OpenAIAdapter.submit` starts the HTTP request as a task of this process
and answers ``RUNNING`` at once; :meth:`fetch` reports the task's state (the output so
far while a response streams, then the result); :meth:`cancel` closes the call. The
gateway's dispatcher keeps the number of held calls within the provider's
``max_concurrency``.

- Requests and outputs are mapped by the tables of :mod:`adapters.openai_mapping`.
- Retries: a refused connection, 429 ``rate_limit_exceeded`` (``Retry-After`` honoured
  up to 120 s), 408, 502, 503 and 504 are tried again, ``max_retries`` times; nothing
  else is. A call that times out or breaks after it was sent is **not** retried: the
  server may have run it, and it has no idempotency key.
- The provider job id is ``<process instance>-<job id>``. A fetch for a call held by
  another process, or by an earlier run of this one, answers ``lost``; the gateway then
  waits ``lost_grace_s`` (the call timeout) for its holder before failing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters import errortext, openai_schema, transport
from adapters import openai_mapping as mapping
from contracts.errors import (
    CapabilityMissing,
    UpstreamRejected,
    UpstreamRetryable,
    WebhookVerificationError,
)
from contracts.job import JobState
from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["DEFAULT_BASE_URL", "STATUS_MAP", "OpenAIAdapter"]

_Upstream = transport.Upstream  # the parameter named ``transport`` hides the module

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_RETRY_AFTER_S = 120.0
KEEP_FINISHED_S = 600.0
_RETRY_CODES = frozenset({408, 429, 502, 503, 504})

#: The held call's phase -> canonical state (docs/providers.md, "OpenAI-compatible").
STATUS_MAP: Mapping[str, JobState] = {
    "in_flight": JobState.RUNNING,
    "succeeded": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "canceled": JobState.CANCELED,
}


@dataclass
class _Call:
    """One held call."""

    phase: str = "in_flight"
    chunks: list[str] = field(default_factory=list)
    output: Any = None
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    ended_at: float | None = None


class _Failed(Exception):
    """Ends a call ``failed`` with a readable message."""


class OpenAIAdapter:
    """Hold calls to one OpenAI-compatible server (see the module docstring).

    Parameters
    ----------
    name : str
        The provider's configured name.
    token : str or None
        The API key (``Authorization: Bearer``); local servers often need none.
    base_url : str
        The API root including ``/v1`` (``https://api.openai.com/v1``).
    api : str
        ``chat``, ``completions`` or ``images``.
    stream : bool
        Stream chat and completions (``output`` fills as tokens arrive).
    request_timeout_s : float
        Longest time a call may take, in seconds.
    max_retries : int
        Extra attempts for the retryable refusals listed above.
    fetch_interval_s, fetch_max_interval_s, rate_limit_per_s
        How often the gateway reads the held call's state; requests per second.
    lost_grace_s : float or None
        How long a call held elsewhere may still end (default: ``request_timeout_s``).
    transport : httpx.AsyncBaseTransport or None
        For tests.
    ca_file : str or None
        PEM file of CA certificates trusted besides certifi's (a private CA).
    """

    def __init__(
        self,
        *,
        name: str,
        token: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        api: str = "chat",
        stream: bool = True,
        request_timeout_s: float = 600.0,
        max_retries: int = 2,
        fetch_interval_s: float = 0.25,
        fetch_max_interval_s: float = 1.0,
        rate_limit_per_s: float | None = None,
        lost_grace_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        grace = request_timeout_s if lost_grace_s is None else lost_grace_s
        self.capabilities = Capabilities(
            webhooks=False, fetch=True, cancel=True, lost_grace_s=grace,
            fetch_interval_s=fetch_interval_s, fetch_max_interval_s=fetch_max_interval_s,
            input_map=mapping.DEFAULT_MAPS.get(api),
        )
        if api not in mapping.API_PATHS:
            raise ValueError(f"api must be one of {sorted(mapping.API_PATHS)}, got {api!r}")
        self._api = api
        self._stream = stream and api != "images"
        self._retries = max_retries
        self._timeout_s = request_timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = _Upstream(
            name=name, base_url=base_url or DEFAULT_BASE_URL, headers=headers,
            timeout_s=request_timeout_s, rate_limit_per_s=rate_limit_per_s, transport=transport,
            ca_file=ca_file,
        )
        self._instance = secrets.token_hex(4)
        self._calls: dict[str, _Call] = {}

    async def aclose(self) -> None:
        """Close every held call, then the client."""
        tasks = [c.task for c in self._calls.values() if c.task and not c.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._http.aclose()

    # --- the port -------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Start holding the call; ``RUNNING`` at once (a retried submit: its state).

        ``request.input`` is the request body as mapped (the default map,
        :data:`adapters.openai_mapping.DEFAULT_MAPS`, refuses an input without ``prompt``).
        """
        self._purge()
        pid = f"{self._instance}-{request.job_id}"
        if pid not in self._calls:
            model = request.target or request.model
            body = mapping.build_request(model, request.input, self._stream)
            call = _Call()
            call.task = asyncio.create_task(self._hold(call, body), name=f"openai:{pid}")
            self._calls[pid] = call
        return self._snapshot(pid, self._calls[pid])

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """The held call's state; ``lost`` when this process does not hold it."""
        call = self._calls.get(ref.provider_job_id)
        if call is None:
            ours = ref.provider_job_id.startswith(self._instance + "-")
            return ProviderSnapshot(
                provider_job_id=ref.provider_job_id, state=JobState.FAILED, raw_status="lost",
                error=f"{self.name}: the call was held by a gateway process that no longer "
                "holds it (restarted?); its outcome is unknown",
                lost=True, provider_restarted=ours,
            )
        return self._snapshot(ref.provider_job_id, call)

    async def cancel(self, ref: ProviderRef) -> bool:
        """Close the held call; True when it was still in flight."""
        call = self._calls.get(ref.provider_job_id)
        if call is None or call.phase != "in_flight" or call.task is None:
            return False
        call.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call.task
        return True

    async def model_schema(self, target: str | None = None) -> dict[str, Any]:
        """The schema of the model this adapter implements (:mod:`adapters.openai_schema`:
        the inputs it maps; a language model's iterator of strings, or image URIs)."""
        return openai_schema.model_schema(self._api)

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """No OpenAI-compatible server calls back for a synchronous call: always refused."""
        raise WebhookVerificationError(f"{self.name}: this provider sends no webhooks")

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        raise CapabilityMissing(f"{self.name}: this provider sends no webhooks")

    # --- the held call --------------------------------------------------------------------

    async def _hold(self, call: _Call, body: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            await self._attempts(call, body)
            call.phase = "succeeded"
        except asyncio.CancelledError:
            call.phase, call.output = "canceled", None
        except _Failed as exc:
            call.phase, call.error = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 (the call's boundary: it must end, readably)
            call.phase = "failed"
            call.error = f"{self.name}: the call failed: {transport.describe(exc)}"
        finally:
            call.metrics["predict_time"] = round(time.monotonic() - started, 3)
            call.ended_at = time.monotonic()

    async def _attempts(self, call: _Call, body: dict[str, Any]) -> None:
        """Up to ``max_retries`` retries of refusals; a refused *connection* (nothing was
        sent) is retried until ``request_timeout_s`` has passed."""
        path = mapping.API_PATHS[self._api]
        started, refusals, attempt = time.monotonic(), 0, 0
        while True:
            try:
                if self._stream:
                    await self._streamed(call, path, body)
                else:
                    await self._whole(call, path, body)
                return
            except _Retry as retry:
                refusals += 0 if retry.unsent else 1
                attempt += 1
                delay = retry.delay_s(attempt - 1)
                if refusals > self._retries or (
                    time.monotonic() - started + delay > self._timeout_s
                ):
                    raise _Failed(retry.reason) from None
                await asyncio.sleep(delay)

    async def _whole(self, call: _Call, path: str, body: dict[str, Any]) -> None:
        try:
            response = await self._http.call("create", "POST", path, idempotent=False, json=body)
        except UpstreamRejected as exc:
            raise _Failed(exc.detail) from exc
        except UpstreamRetryable as exc:  # could not connect, or rate-limited: nothing sent
            raise _Retry(exc.detail, exc.retry_after_s, unsent=True) from exc
        self._check(response)
        self._read_whole(call, response)

    def _read_whole(self, call: _Call, response: httpx.Response) -> None:
        try:
            data = response.json()
            call.output = mapping.output_of(self._api, data)
        except ValueError as exc:
            raise _Failed(
                f"{self.name}: the response is not a {self._api} result ({exc}): "
                f"{transport.excerpt(response.content)}"
            ) from exc
        call.metrics.update(mapping.usage_metrics(data))
        reason = mapping.finish_reason(data)
        if reason and reason != "stop":
            call.logs.append(f"finish_reason: {reason}")

    async def _streamed(self, call: _Call, path: str, body: dict[str, Any]) -> None:
        try:
            self._http.limiter.take(self.name)
        except UpstreamRetryable as exc:
            raise _Retry(exc.detail, exc.retry_after_s, unsent=True) from exc
        client = self._http.client
        try:
            async with client.stream("POST", path, json=body) as response:
                if response.status_code >= 300:
                    await response.aread()
                    self._check(response)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    await response.aread()  # a server that does not stream: one answer
                    self._read_whole(call, response)
                    return
                if not await self._read_events(call, response):
                    raise _Failed(
                        f"{self.name}: the stream ended before [DONE] or a finish_reason"
                    )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Retry(f"{self.name}: cannot connect ({type(exc).__name__})", None,
                         unsent=True) from exc
        except httpx.HTTPError as exc:
            raise _Failed(
                f"{self.name}: the call broke after it was sent ({type(exc).__name__}); "
                "not retried, the server may have run it"
            ) from exc
        call.output = list(call.chunks)

    async def _read_events(self, call: _Call, response: httpx.Response) -> bool:
        """Apply each ``data:`` event; True when the stream is complete: it ended with
        ``[DONE]``, or at EOF after a chunk that carried a ``finish_reason`` (TGI sends no
        ``[DONE]``). An in-band error (a ``data: {"error": ...}`` event, an ``event:
        error``, llama.cpp's ``error:`` field) raises ``_Failed`` with its message."""
        finished, event = False, ""
        async for line in response.aiter_lines():
            if not line:
                event = ""
                continue
            if line.startswith("event:"):
                event = line[6:].strip()
                continue
            field = "error" if line.startswith("error:") else "data"
            if not line.startswith(field + ":"):
                continue
            data = line[len(field) + 1 :].strip()
            if data == "[DONE]":
                return True
            try:
                chunk = json.loads(data)
            except ValueError:
                if field == "error" or event == "error":
                    raise _Failed(self._in_band(data)) from None
                raise _Failed(
                    f"{self.name}: a streamed event is not JSON: {transport.excerpt(data)}"
                ) from None
            if field == "error" or event == "error" or mapping.stream_error(chunk) is not None:
                raise _Failed(self._in_band(mapping.stream_error(chunk) or chunk))
            text = mapping.delta_of(self._api, chunk)
            if text:
                call.chunks.append(text)
                call.output = list(call.chunks)
            call.metrics.update(mapping.usage_metrics(chunk))
            reason = mapping.finish_reason(chunk)
            finished = finished or reason is not None
            if reason and reason != "stop":
                call.logs.append(f"finish_reason: {reason}")
        return finished

    def _in_band(self, error: Any) -> str:
        return errortext.one_line(
            f"{self.name}: the server reported an error in the stream: "
            f"{mapping.error_text(error)}"
        )

    def _check(self, response: httpx.Response) -> None:
        code = response.status_code
        if code < 300:
            return
        text = transport.excerpt(response.content)
        if code in _RETRY_CODES and "insufficient_quota" not in text:
            after = transport.parse_retry_after(response.headers.get("retry-after"))
            raise _Retry(f"{self.name}: answered {code}: {text}", after)
        raise _Failed(f"{self.name}: answered {code}: {text}")

    def _snapshot(self, pid: str, call: _Call) -> ProviderSnapshot:
        state = STATUS_MAP[call.phase]
        output = call.output if state in (JobState.RUNNING, JobState.COMPLETED) else None
        return ProviderSnapshot(
            provider_job_id=pid, state=state, raw_status=call.phase, output=output,
            logs="\n".join(call.logs) or None, error=call.error, metrics=dict(call.metrics),
        )

    def _purge(self) -> None:
        horizon = time.monotonic() - KEEP_FINISHED_S
        for pid in [p for p, c in self._calls.items() if c.ended_at and c.ended_at < horizon]:
            del self._calls[pid]


class _Retry(Exception):
    """A refusal that may pass on a later attempt."""

    def __init__(self, reason: str, retry_after_s: float | None, unsent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.unsent = unsent  # the request never left (no connection, or the rate limit)

    def delay_s(self, attempt: int) -> float:
        if self.retry_after_s is not None:
            if self.retry_after_s > MAX_RETRY_AFTER_S:
                raise _Failed(f"{self.reason} (Retry-After {self.retry_after_s:.0f} s is too long)")
            return self.retry_after_s
        return min(5.0, 0.25 * 2**attempt)


