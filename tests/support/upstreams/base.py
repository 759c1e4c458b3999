"""What every fake provider server shares: jobs, scripted faults, webhooks, down/up.

A fake is a real aiohttp app on 127.0.0.1 (port 0 at first; :meth:`FakeUpstream.down`
and :meth:`FakeUpstream.up` close and reopen the same port). Subclasses add the routes
of one provider's documented wire format and render its bodies.

* Jobs are :class:`UpJob` rows. In manual mode a test moves them (:meth:`start`,
  :meth:`finish`, :meth:`fail`, :meth:`expire`); in ``auto`` mode they behave like the
  echo model (``prompt`` upper-cased, ``steps`` x ``delay`` seconds, ``fail``,
  ``output_kind``) and finish by themselves.
* :meth:`fault` queues raw answers for the next requests of one operation (``submit``,
  ``status``, ``result``, ``cancel``, ``any``): 429/5xx bursts with ``Retry-After``,
  malformed, empty, null or 10 MB bodies; status ``0`` closes the connection unanswered.
  :attr:`FakeUpstream.times` records when each operation was asked.
* Webhooks the provider would send are recorded in :attr:`deliveries`; in ``auto``
  mode (or with :attr:`send_webhooks`) they are also POSTed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import mimetypes
import ssl
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["Delivery", "FakeUpstream", "Fault", "UpJob"]

TERMINAL = ("succeeded", "failed", "canceled")
FILE_BYTES = b"FILE FROM THE FAKE"


@dataclass
class UpJob:
    """One job as the fake provider holds it."""

    id: str
    input: dict[str, Any]
    webhook: str | None = None
    scope: str = ""  # the fal app or RunPod endpoint it was submitted to
    state: str = "queued"  # queued | running | succeeded | failed | canceled
    output: Any = None
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    expired: bool = False
    cancel_requested: bool = False
    created: float = field(default_factory=time.monotonic)
    done_at: float | None = None  # auto mode

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass
class Fault:
    """A raw answer for the next ``times`` requests of ``op``."""

    op: str
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


@dataclass(frozen=True)
class Delivery:
    """A webhook the provider sent (or would have sent)."""

    url: str
    headers: dict[str, str]
    body: bytes


class FakeUpstream:
    """Base of the fake provider servers (see the module docstring)."""

    #: What file outputs look like at this provider: "url" (served here) or "data".
    file_form = "url"

    def __init__(self, *, auto: bool = False, token: str | None = None) -> None:
        self.auto = auto
        self.send_webhooks = auto
        self.token = token
        self.jobs: dict[str, UpJob] = {}
        self.files: dict[str, bytes] = {}
        self.faults: deque[Fault] = deque()
        self.deliveries: list[Delivery] = []
        self.requests: list[tuple[str, str]] = []
        self.fetched: list[str] = []  # names of files read from /files/{name}
        self.times: list[tuple[str, float]] = []  # (op, time.monotonic())
        self.ssl_context: ssl.SSLContext | None = None
        self.app = web.Application(client_max_size=64 * 1024**2)
        self.app.router.add_get("/files/{name}", self._file)
        self.routes(self.app.router)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> FakeUpstream:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await self.up()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self._runner is not None
        await self._runner.cleanup()

    async def up(self) -> None:
        """Listen (again) on 127.0.0.1, on the first port this fake got."""
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if not self.port:
            server = self._site._server  # the listening socket's port, as bound
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def down(self) -> None:
        """Stop listening: connections are refused until :meth:`up`."""
        assert self._site is not None
        await self._site.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- test controls ---------------------------------------------------------------------

    def fault(self, op: str, status: int, body: bytes | str | None = b"", times: int = 1,
              **headers: str) -> None:
        data = body.encode() if isinstance(body, str) else (b"null" if body is None else body)
        self.faults.append(Fault(op, status, data, {k.replace("_", "-"): v
                                                    for k, v in headers.items()}, times))

    def only(self) -> UpJob:
        """The one job submitted so far."""
        assert len(self.jobs) == 1, f"{len(self.jobs)} jobs at the fake"
        return next(iter(self.jobs.values()))

    def start(self, job: UpJob) -> None:
        job.state = "running"
        job.logs.append("started")
        self.on_change(job, "start")

    def finish(self, job: UpJob, output: Any = None) -> None:
        job.state, job.output = "succeeded", output if output is not None else self.echo(job)
        self.on_change(job, "completed")

    def fail(self, job: UpJob, error: str = "asked to fail") -> None:
        job.state, job.error = "failed", error
        self.on_change(job, "completed")

    def expire(self, job: UpJob) -> None:
        """The provider forgets the result (its retention ran out)."""
        job.expired = True

    def cancel_job(self, job: UpJob) -> bool:
        """A cancel request: True if the job was still active (it is now canceled)."""
        if job.terminal:
            return False
        job.cancel_requested = True
        job.state = "canceled"
        self.on_change(job, "completed")
        return True

    # --- for subclasses --------------------------------------------------------------------

    def routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    def webhook_for(self, job: UpJob, event: str) -> tuple[dict[str, str], bytes] | None:
        """Headers and body of the webhook for ``event`` (start/completed), or None."""
        return None

    def new_job(self, input_: dict[str, Any], webhook: str | None, scope: str = "",
                job_id: str | None = None) -> UpJob:
        job = UpJob(id=job_id or uuid.uuid4().hex, input=input_, webhook=webhook, scope=scope)
        self.jobs[job.id] = job
        if self.auto:
            steps = input_.get("steps", 1)
            delay = input_.get("delay", 0)
            seconds = float(steps) * float(delay) if isinstance(steps, int | float) and isinstance(
                delay, int | float) else 0.0
            job.done_at = time.monotonic() + seconds
            job.state = "running"
            self._spawn(self._auto_finish(job, seconds))
        return job

    def echo(self, job: UpJob) -> Any:
        """The echo model's answer for the job's input, in this provider's file form."""
        prompt = str(job.input.get("prompt", ""))
        kind = job.input.get("output_kind", "text")
        if kind == "json":
            return {"prompt": prompt, "steps": job.input.get("steps", 1)}
        if kind in ("file", "files"):
            return self.file_value(f"{job.id}.txt", prompt.upper().encode())
        return prompt.upper()

    def file_value(self, name: str, data: bytes) -> str:
        if self.file_form == "data":
            return "data:text/plain;base64," + base64.b64encode(data).decode()
        self.files[name] = data
        return f"{self.url}/files/{name}"

    def check_auth(self, request: web.Request, scheme: str) -> web.Response | None:
        if self.token is None:
            return None
        if request.headers.get("Authorization") != f"{scheme} {self.token}":
            return web.json_response({"detail": "Unauthorized"}, status=401)
        return None

    def faulted(self, op: str, request: web.Request) -> web.Response | None:
        """Record the request; a queued fault's answer for ``op``, if any."""
        self.requests.append((op, request.path))
        self.times.append((op, time.monotonic()))
        for fault in self.faults:
            if fault.op in (op, "any"):
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                if fault.status == 0:  # the connection drops before any answer
                    assert request.transport is not None
                    request.transport.close()
                return web.Response(status=fault.status or 500, body=fault.body,
                                    headers=fault.headers)
        return None

    def on_change(self, job: UpJob, event: str) -> None:
        made = self.webhook_for(job, event) if job.webhook else None
        if made is None:
            return
        assert job.webhook is not None
        delivery = Delivery(job.webhook, *made)
        self.deliveries.append(delivery)
        if self.send_webhooks:
            self._spawn(self._post(delivery))

    # --- internals -------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _auto_finish(self, job: UpJob, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if job.terminal:
            return
        if job.input.get("fail"):
            self.fail(job, f"asked to fail: {job.input.get('prompt')}")
        else:
            self.finish(job)

    async def _post(self, delivery: Delivery) -> None:
        headers = {"Content-Type": "application/json", **delivery.headers}
        try:
            async with aiohttp.ClientSession() as session, session.post(
                delivery.url, data=delivery.body, headers=headers, ssl=self.ssl_context or True,
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError):
            pass  # like most providers here: one attempt (tests deliver by hand otherwise)

    async def _file(self, request: web.Request) -> web.Response:
        self.fetched.append(request.match_info["name"])
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        kind = mimetypes.guess_type(request.match_info["name"])[0] or "text/plain"
        return web.Response(body=data, content_type=kind)


def json_body(request_body: bytes) -> Any:
    return json.loads(request_body) if request_body else None
