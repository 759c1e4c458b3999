"""The fake provider of a chaos run: a real HTTP server that injects the profile's faults.

It speaks the wire format of ``adapters/remote_fake.py`` (the gateway reaches it with
``kind = "fake"`` and a ``base_url``) and keeps the ground truth the run is checked
against: for each job, the final state and output it reported and the SHA-256 of every
output file (docs/reliability.md).

A job is queued for up to ``queue_max_s``, runs for ``run_min_s``..``run_max_s``, then
succeeds (or fails, ``provider_failed_ratio``) unless it was canceled first. Each state
change is sent as a signed webhook that may be lost, duplicated, or sent late (which
also reorders it). Any API call may be answered 429 or 5xx, some with ``Retry-After``.
The server counts the jobs active at once, so a run can prove that the gateway never
exceeded the provider's ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from adapters.fake import FakeAdapter
from chaos.profile import FaultProfile
from contracts.job import JobState

__all__ = ["FakeJob", "FakeProvider"]

_ACTIVE = frozenset({JobState.QUEUED, JobState.RUNNING})


@dataclass
class FakeJob:
    """One job as the provider knows it; ``files`` holds the SHA-256 of each output file."""

    job_id: str
    input: dict[str, Any]
    webhook: str | None
    status: JobState = JobState.QUEUED
    output: Any = None
    logs: str = ""
    error: str | None = None
    files: list[str] = field(default_factory=list)
    submits: int = 0
    terminal_at: float | None = None

    @property
    def provider_job_id(self) -> str:
        return FakeAdapter.provider_job_id(self.job_id)

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.provider_job_id, "status": self.status.value, "output": self.output,
            "logs": self.logs or None, "error": self.error,
        }


class FakeProvider:
    """The server's state and handlers; serve it with :meth:`app`.

    Parameters
    ----------
    profile : FaultProfile
        Which faults to inject, and how often.
    secret : str
        The HMAC key webhooks are signed with (the gateway's ``webhook_auth_token``).
    rng : random.Random
        Every random choice comes from it, so a seed repeats a run's plan.
    corrupt_one_file : bool
        Record a wrong checksum for the first file output: a deliberately broken
        promise, to prove the checks catch one (``cutover chaos --break-invariant``).
    """

    def __init__(
        self, profile: FaultProfile, *, secret: str, rng: random.Random,
        corrupt_one_file: bool = False,
    ) -> None:
        self.profile = profile
        self.jobs: dict[str, FakeJob] = {}
        self.faults: Counter[str] = Counter()
        self.webhook_answers: Counter[str] = Counter()
        self.signatures: set[str] = set()
        self.active = 0
        self.peak_active = 0
        self.corrupted: str | None = None
        self._corrupt = corrupt_one_file
        self._signer = FakeAdapter(secret=secret)
        self._rng = rng
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        """The aiohttp application (jobs API); its cleanup stops every pending task."""
        app = web.Application()
        app.router.add_post("/jobs", self._submit)
        app.router.add_get("/jobs/{pid}", self._fetch)
        app.router.add_post("/jobs/{pid}/cancel", self._cancel)
        app.cleanup_ctx.append(self._lifetime)
        return app

    async def _lifetime(self, app: web.Application) -> Any:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        yield
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._session.close()

    def job(self, job_id: str) -> FakeJob | None:
        """The job the gateway submitted as ``job_id`` (its own prediction id)."""
        return self.jobs.get(job_id)

    # --- the API -----------------------------------------------------------------------

    async def _submit(self, request: web.Request) -> web.Response:
        if (refused := self._maybe_refuse("submit")) is not None:
            return refused
        body = await request.json()
        job = self.jobs.get(body["id"])
        if job is None:
            job = FakeJob(job_id=body["id"], input=body.get("input") or {},
                          webhook=body.get("webhook"))
            self.jobs[job.job_id] = job
            self._count_active(+1)
            self._spawn(self._lifecycle(job))
        job.submits += 1
        return web.json_response(job.wire())

    async def _fetch(self, request: web.Request) -> web.Response:
        if (refused := self._maybe_refuse("fetch")) is not None:
            return refused
        job = self._by_pid(request.match_info["pid"])
        if job is None:
            return web.json_response({"detail": "unknown job"}, status=404)
        return web.json_response(job.wire())

    async def _cancel(self, request: web.Request) -> web.Response:
        if (refused := self._maybe_refuse("cancel")) is not None:
            return refused
        job = self._by_pid(request.match_info["pid"])
        if job is None:
            return web.json_response({"detail": "unknown job"}, status=404)
        if job.status not in _ACTIVE:
            return web.json_response({"canceled": False})
        self._finish(job, JobState.CANCELED)
        return web.json_response({"canceled": True})

    def _by_pid(self, pid: str) -> FakeJob | None:
        return self.jobs.get(pid.removeprefix("fake-")) if pid.startswith("fake-") else None

    def _maybe_refuse(self, call: str) -> web.Response | None:
        if self._rng.random() >= self.profile.provider_error_ratio:
            return None
        status = self._rng.choice((429, 500, 502, 503))
        self.faults[f"provider_{call}_{status}"] += 1
        headers = {}
        if self._rng.random() < self.profile.retry_after_ratio:
            seconds = self._rng.uniform(0, self.profile.retry_after_max_s)
            headers["Retry-After"] = str(round(seconds))
        return web.json_response({"detail": "injected fault"}, status=status, headers=headers)

    # --- a job's life ------------------------------------------------------------------------

    async def _lifecycle(self, job: FakeJob) -> None:
        profile = self.profile
        await asyncio.sleep(self._rng.uniform(0, profile.queue_max_s))
        if job.status is not JobState.QUEUED:
            return
        job.status, job.logs = JobState.RUNNING, "started\n"
        self._send(job)
        asked = job.input.get("run_s")
        run_s = float(asked) if isinstance(asked, int | float) else None
        await asyncio.sleep(run_s or self._rng.uniform(profile.run_min_s, profile.run_max_s))
        if job.status is not JobState.RUNNING:
            return
        if self._rng.random() < profile.provider_failed_ratio:
            job.error = "injected model failure"
            self._finish(job, JobState.FAILED)
            return
        job.output = self._output(job)
        job.logs += "done\n"
        self._finish(job, JobState.COMPLETED)

    def _output(self, job: FakeJob) -> Any:
        kind = str(job.input.get("kind", "text"))
        seed = str(job.input.get("seed", ""))
        if kind == "file":
            return self._file(job)
        if kind == "files":
            return [self._file(job), self._file(job)]
        if kind == "list":
            return [f"a-{seed}", f"b-{seed}", {"n": len(seed)}]
        return f"echo-{seed}"

    def _file(self, job: FakeJob) -> str:
        data = self._rng.randbytes(self._rng.randint(1, 32 * 1024))
        digest = hashlib.sha256(data).hexdigest()
        if self._corrupt and self.corrupted is None:
            self.corrupted, digest = job.job_id, hashlib.sha256(data + b"!").hexdigest()
        job.files.append(digest)
        return "data:application/octet-stream;base64," + base64.b64encode(data).decode()

    def _finish(self, job: FakeJob, state: JobState) -> None:
        job.status, job.terminal_at = state, time.monotonic()
        self._count_active(-1)
        self._send(job)

    def _count_active(self, delta: int) -> None:
        self.active += delta
        self.peak_active = max(self.peak_active, self.active)

    # --- webhooks to the gateway ------------------------------------------------------------

    def _send(self, job: FakeJob) -> None:
        if not job.webhook:
            return
        body = self._signer.webhook_body(
            job.job_id, job.status, output=job.output, logs=job.logs or None, error=job.error
        )
        profile, rng = self.profile, self._rng
        if rng.random() < profile.webhook_lost_ratio:
            self.faults["webhook_lost"] += 1
            return
        copies = 1
        if rng.random() < profile.webhook_duplicate_ratio:
            self.faults["webhook_duplicated"] += 1
            copies = 2
        for _ in range(copies):
            delay = 0.0
            if rng.random() < profile.webhook_late_ratio:
                self.faults["webhook_late"] += 1
                delay = rng.uniform(0, profile.webhook_late_max_s)
            self._spawn(self._post(job.webhook, body, delay))

    async def _post(self, url: str, body: bytes, delay_s: float) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        assert self._session is not None
        signed = self._signer.sign(body)
        self.signatures.update(signed.values())
        headers = {**signed, "Content-Type": "application/json"}
        try:
            async with self._session.post(url, data=body, headers=headers) as response:
                await response.read()
                self.webhook_answers[str(response.status)] += 1
        except (aiohttp.ClientError, TimeoutError):
            self.webhook_answers["unreachable"] += 1  # gateway down: polling recovers

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
