"""A fake Cog server (coglet 0.23.1's wire format, docs/providers.md "Cog"): ``PUT
/predictions/{id}`` with ``Prefer: respond-async``, cancel, no GET (405), webhooks with
``Authorization: Bearer <token>``; a finished prediction is forgotten, so a PUT of its
id runs it again (the watchdog's "lost" case)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.support.upstreams.base import FakeUpstream, UpJob

__all__ = ["COG_FAKE_TOKEN", "FakeCog"]

COG_FAKE_TOKEN = "cog-fake-webhook-token"  # a test value, not a credential

_STATUS = {
    "queued": "starting",
    "running": "processing",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "canceled",
}


class FakeCog(FakeUpstream):
    file_form = "data"

    def __init__(self, **kwargs: Any) -> None:
        self.forgotten: dict[str, UpJob] = {}
        super().__init__(**kwargs)

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_put("/predictions/{id}", self._put)
        router.add_post("/predictions/{id}/cancel", self._cancel)
        router.add_get("/predictions/{id}", self._no_get)

    def snapshot(self, job: UpJob, with_input: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"id": job.id, "status": _STATUS[job.state],
                                "logs": "\n".join(job.logs), "metrics": {}}
        if with_input:
            body["input"] = job.input
        if job.state == "succeeded":
            body["output"] = job.output
            body["metrics"] = {"predict_time": 0.5}
        if job.state == "failed":
            body["error"] = job.error
        return body

    def webhook_for(self, job: UpJob, event: str) -> tuple[dict[str, str], bytes] | None:
        headers = {"Authorization": f"Bearer {COG_FAKE_TOKEN}", "User-Agent": "coglet/0.23.1"}
        return headers, json.dumps(self.snapshot(job)).encode()

    def on_change(self, job: UpJob, event: str) -> None:
        super().on_change(job, event)
        if job.terminal:  # Cog forgets a prediction once it is over
            self.forgotten[job.id] = self.jobs.pop(job.id)

    async def _put(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("submit", request)) is not None:
            return answer
        job_id = request.match_info["id"]
        known = self.jobs.get(job_id)
        if known is not None:
            return web.json_response(self.snapshot(known, with_input=True), status=202)
        data = await request.json()
        if not isinstance(data.get("input"), dict):
            return web.json_response(
                {"detail": [{"loc": ["body", "input", "__root__"], "msg": "not an object"}]},
                status=422,
            )
        job = self.new_job(data["input"], data.get("webhook"), job_id=job_id)
        return web.json_response({"id": job.id, "status": "starting"}, status=202)

    async def _cancel(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("cancel", request)) is not None:
            return answer
        job = self.jobs.get(request.match_info["id"])
        if job is None or not self.cancel_job(job):
            return web.json_response({}, status=404)
        return web.json_response({})

    async def _no_get(self, request: web.Request) -> web.Response:
        return web.Response(status=405)
