"""A fake Replicate API (docs/providers.md, "replicate"): creates by version, model and
deployment, GET, cancel, ``/v1/files`` uploads, the webhook secret, and Standard
Webhooks-signed events (start, completed). Ids have Replicate's shape (26 lowercase
characters); a prediction names its model and version and its real creation time."""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook

from tests.support.upstreams.base import FakeUpstream, UpJob

__all__ = ["REPLICATE_TOKEN", "FakeReplicate"]

REPLICATE_TOKEN = "r8_fake_upstream_token"  # a test value, not a credential

_STATUS = {
    "queued": "starting",
    "running": "processing",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "canceled",
}


class FakeReplicate(FakeUpstream):
    def __init__(self, **kwargs: Any) -> None:
        self.secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        self.created_by: list[str] = []  # "version:<id>", "model:<o/n>", "deployment:<o/n>"
        self.created_at: dict[str, datetime] = {}
        self.facts: dict[str, dict[str, Any]] = {}  # id -> model, version, stream
        #: ``owner/name`` -> (version id, its openapi_schema), served by the models API.
        self.versions: dict[str, tuple[str, dict[str, Any]]] = {}
        super().__init__(**kwargs)

    def new_job(self, input_: dict[str, Any], webhook: str | None, scope: str = "",
                job_id: str | None = None) -> UpJob:
        job_id = job_id or base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()
        self.created_at[job_id] = datetime.now(UTC)
        return super().new_job(input_, webhook, scope, job_id)

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/predictions", self._by_version)
        router.add_post("/v1/models/{owner}/{name}/predictions", self._by_model)
        router.add_post("/v1/deployments/{owner}/{name}/predictions", self._by_deployment)
        router.add_get("/v1/predictions/{id}", self._get)
        router.add_get("/v1/predictions", self._list)
        router.add_post("/v1/predictions/{id}/cancel", self._cancel)
        router.add_get("/v1/webhooks/default/secret", self._secret)
        router.add_post("/v1/files", self._upload)
        router.add_get("/v1/models/{owner}/{name}", self._model)
        router.add_get("/v1/models/{owner}/{name}/versions/{version}", self._version)

    def _version_body(self, request: web.Request) -> dict[str, Any] | None:
        found = self.versions.get(f"{request.match_info['owner']}/{request.match_info['name']}")
        if found is None:
            return None
        return {"id": found[0], "created_at": "2026-01-01T00:00:00Z", "cog_version": "0.23.1",
                "openapi_schema": found[1]}

    async def _model(self, request: web.Request) -> web.Response:
        version = self._version_body(request)
        if version is None:
            return web.json_response({"detail": "Not found."}, status=404)
        return web.json_response({"owner": request.match_info["owner"],
                                  "name": request.match_info["name"], "latest_version": version})

    async def _version(self, request: web.Request) -> web.Response:
        version = self._version_body(request)
        if version is None or version["id"] != request.match_info["version"]:
            return web.json_response({"detail": "Not found."}, status=404)
        return web.json_response(version)

    def prediction(self, job: UpJob) -> dict[str, Any]:
        return {
            "id": job.id, "status": _STATUS[job.state], "input": job.input,
            "output": job.output if job.state in ("running", "succeeded") else None,
            "error": job.error, "logs": "\n".join(job.logs),
            "metrics": {"predict_time": 0.5} if job.terminal else {},
            "created_at": _iso(self.created_at.get(job.id)),
            "model": self.facts.get(job.id, {}).get("model", "acme/echo"),
            "version": self.facts.get(job.id, {}).get("version", "hidden"),
            "urls": {"get": f"{self.url}/v1/predictions/{job.id}",
                     "cancel": f"{self.url}/v1/predictions/{job.id}/cancel",
                     **({"stream": f"{self.url}/v1/streams/{job.id}"}
                        if self.facts.get(job.id, {}).get("stream") else {})},
        }

    def webhook_for(self, job: UpJob, event: str) -> tuple[dict[str, str], bytes] | None:
        return self.sign(json.dumps(self.prediction(job)).encode())

    def sign(self, body: bytes, when: datetime | None = None) -> tuple[dict[str, str], bytes]:
        msg_id, now = f"msg_{uuid.uuid4().hex}", when or datetime.now(UTC)
        signature = Webhook(self.secret).sign(msg_id, now, body.decode())
        headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                   "webhook-signature": signature}
        return headers, body

    async def _create(self, request: web.Request, how: str) -> web.Response:
        if (answer := self.faulted("submit", request)) is not None:
            return answer
        if (denied := self.check_auth(request, "Bearer")) is not None:
            return denied
        data = await request.json()
        if not isinstance(data, dict) or not isinstance(data.get("input"), dict):
            return web.json_response({"detail": "input is required", "status": 422}, status=422)
        if how == "version":
            how = f"version:{data.get('version')}"
        self.created_by.append(how)
        job = self.new_job(data["input"], data.get("webhook"))
        model = how.partition(":")[2] if how.startswith(("model:", "deployment:")) else None
        self.facts[job.id] = {"model": model or "acme/echo", "stream": bool(data.get("stream")),
                              "version": data.get("version") or "hidden"}
        return web.json_response(self.prediction(job), status=201)

    async def _by_version(self, request: web.Request) -> web.Response:
        return await self._create(request, "version")

    async def _by_model(self, request: web.Request) -> web.Response:
        info = request.match_info
        return await self._create(request, f"model:{info['owner']}/{info['name']}")

    async def _by_deployment(self, request: web.Request) -> web.Response:
        info = request.match_info
        return await self._create(request, f"deployment:{info['owner']}/{info['name']}")

    async def _get(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("status", request)) is not None:
            return answer
        job = self.jobs.get(request.match_info["id"])
        if job is None or job.expired:
            return web.json_response({"detail": "Not found", "status": 404}, status=404)
        return web.json_response(self.prediction(job))

    async def seed(self, count: int, *, every_s: float = 60.0) -> list[str]:
        """``count`` succeeded predictions, one ``every_s`` seconds into the past (the
        newest now), each with a file output; their ids, newest first."""
        made = []
        for n in range(count):
            job = self.new_job({"prompt": f"p{n}", "output_kind": "file"}, None)
            self.created_at[job.id] = datetime.now(UTC) - timedelta(seconds=every_s * n)
            self.finish(job)
            made.append(job.id)
        return made

    async def _list(self, request: web.Request) -> web.Response:
        """Newest first, 100 a page; ``cursor`` is the position (opaque to clients)."""
        if (answer := self.faulted("list", request)) is not None:
            return answer
        ordered = sorted((j for j in self.jobs.values() if not j.expired),
                         key=lambda j: self.created_at.get(j.id, _EPOCH), reverse=True)
        start = int(request.query.get("cursor", "0"))
        page = ordered[start:start + 100]
        more = start + 100 < len(ordered)
        return web.json_response({
            "previous": None,
            "next": f"{self.url}/v1/predictions?cursor={start + 100}" if more else None,
            "results": [self.prediction(j) for j in page],
        })

    async def _cancel(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("cancel", request)) is not None:
            return answer
        job = self.jobs.get(request.match_info["id"])
        if job is None:
            return web.json_response({"detail": "Not found", "status": 404}, status=404)
        self.cancel_job(job)
        return web.json_response(self.prediction(job))

    async def _secret(self, request: web.Request) -> web.Response:
        return web.json_response({"key": self.secret})

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        content = form["content"]
        data = content.file.read()  # type: ignore[union-attr]
        name = f"upload-{uuid.uuid4().hex[:8]}"
        self.files[name] = data
        return web.json_response({"id": name, "size": len(data),
                                  "urls": {"get": f"{self.url}/files/{name}"}}, status=201)


_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(at: datetime | None) -> str:
    return (at or _EPOCH).isoformat().replace("+00:00", "Z")
