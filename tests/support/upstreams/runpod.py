"""A fake RunPod serverless API in the cloud's shapes (docs/providers.md, "RunPod"):
``/v2/{endpoint}/run``, ``/status/{id}``, ``/cancel/{id}``, unsigned terminal webhooks
carrying the status object plus the job's input.

:attr:`FakeRunPod.cancel_ignored` answers ``/cancel`` with ``CANCELLED`` while the worker
keeps running the job (a sync handler cannot be stopped before it returns,
docs/providers.md §3.4): its status stays ``IN_PROGRESS`` until the test finishes it.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.support.upstreams.base import FakeUpstream, UpJob

__all__ = ["RUNPOD_TOKEN", "FakeRunPod"]

RUNPOD_TOKEN = "runpod-test-key"  # a test value, not a credential

_STATUS = {
    "queued": "IN_QUEUE",
    "running": "IN_PROGRESS",
    "succeeded": "COMPLETED",
    "failed": "FAILED",
    "canceled": "CANCELLED",
}


class FakeRunPod(FakeUpstream):
    file_form = "data"  # handlers return base64; the gateway copies it
    cancel_ignored = False

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v2/{ep}/run", self._run)
        router.add_get("/v2/{ep}/status/{id}", self._status)
        router.add_post("/v2/{ep}/cancel/{id}", self._cancel)

    def status_body(self, job: UpJob) -> dict[str, Any]:
        body: dict[str, Any] = {"id": job.id, "status": _STATUS[job.state], "delayTime": 12,
                                "executionTime": 500 if job.terminal else None}
        if job.state == "succeeded":
            body["output"] = job.output
        if job.state == "failed":
            body["error"] = job.error
        return body

    def webhook_for(self, job: UpJob, event: str) -> tuple[dict[str, str], bytes] | None:
        if event != "completed":
            return None
        body = {**self.status_body(job), "input": job.input, "webhook": job.webhook}
        return {"User-Agent": "RunPod"}, json.dumps(body).encode()

    async def _run(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("submit", request)) is not None:
            return answer
        if (denied := self.check_auth(request, "Bearer")) is not None:
            return denied
        data = await request.json()
        if not isinstance(data, dict) or not isinstance(data.get("input"), dict):
            return web.json_response({"error": "input must be an object"}, status=400)
        job = self.new_job(data["input"], data.get("webhook"), scope=request.match_info["ep"])
        return web.json_response({"id": job.id, "status": "IN_QUEUE"})

    def _job(self, request: web.Request) -> UpJob | None:
        job = self.jobs.get(request.match_info["id"])
        return job if job is not None and job.scope == request.match_info["ep"] else None

    async def _status(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("status", request)) is not None:
            return answer
        job = self._job(request)
        if job is None or job.expired:
            return web.json_response({"error": "job not found"}, status=404)
        return web.json_response(self.status_body(job))

    async def _cancel(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("cancel", request)) is not None:
            return answer
        job = self._job(request)
        if job is None:
            return web.json_response({"error": "job not found"}, status=404)
        if self.cancel_ignored and not job.terminal:
            job.cancel_requested = True
            return web.json_response({"id": job.id, "status": "CANCELLED"})
        self.cancel_job(job)
        return web.json_response({"id": job.id, "status": _STATUS[job.state]})
