"""A fake fal queue (docs/providers.md, "fal"): submit, status, result, cancel, JWKS,
and Ed25519-signed completion webhooks made with a test key.

A failed job's status carries ``error: "Invalid status code: 422"``, as fal's does, and
its result is the 422 with ``detail``; :meth:`FakeFal.refuse` makes that detail fal's
list of field errors, each echoing the offending ``input`` (a prompt, a base64 image).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.support.upstreams.base import FakeUpstream, UpJob

__all__ = ["FAL_TOKEN", "FakeFal", "sign_fal"]

FAL_TOKEN = "fal-test-key"  # a test value, not a credential


def sign_fal(key: Ed25519PrivateKey, request_id: str, body: bytes,
             timestamp: int | None = None, user_id: str = "user-1") -> dict[str, str]:
    """fal's webhook headers for ``body``, signed with ``key``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    message = f"{request_id}\n{user_id}\n{ts}\n{hashlib.sha256(body).hexdigest()}".encode()
    return {
        "X-Fal-Webhook-Request-Id": request_id,
        "X-Fal-Webhook-User-Id": user_id,
        "X-Fal-Webhook-Timestamp": ts,
        "X-Fal-Webhook-Signature": key.sign(message).hex(),
    }


def jwk(key: Ed25519PrivateKey) -> dict[str, str]:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "x": x}


class FakeFal(FakeUpstream):
    """The queue at ``/{owner}/{app}...``; the JWKS at ``/.well-known/jwks.json``."""

    def __init__(self, **kwargs: Any) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.refusals: dict[str, list[dict[str, Any]]] = {}
        super().__init__(**kwargs)

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/.well-known/jwks.json", self._jwks)
        router.add_get("/{owner}/{app}/requests/{id}/status", self._status)
        router.add_put("/{owner}/{app}/requests/{id}/cancel", self._cancel)
        router.add_get("/{owner}/{app}/requests/{id}", self._result)
        router.add_post("/{owner}/{app:.+}", self._submit)

    def webhook_for(self, job: UpJob, event: str) -> tuple[dict[str, str], bytes] | None:
        if event != "completed":
            return None  # fal calls back once, on completion
        if job.state == "succeeded":
            body: dict[str, Any] = {"status": "OK", "payload": job.output}
        elif job.state == "canceled":
            body = {"status": "ERROR", "error": "Invalid status code: 499",
                    "payload": {"detail": "Request cancelled by the client."}}
        else:
            body = {"status": "ERROR", "error": "Invalid status code: 422",
                    "payload": {"detail": self.detail(job)}}
        raw = json.dumps({"request_id": job.id, "gateway_request_id": job.id, **body}).encode()
        return sign_fal(self.key, job.id, raw), raw

    def refuse(self, job: UpJob, items: list[dict[str, Any]]) -> None:
        """The model refuses the input: a 422 whose ``detail`` is ``items`` (``loc``,
        ``msg``, ``type``, and the ``input`` fal echoes)."""
        self.refusals[job.id] = items
        self.fail(job, str(items[0].get("msg", "refused")))

    def detail(self, job: UpJob) -> Any:
        return self.refusals.get(job.id, job.error)

    def signed(self, job: UpJob, body: bytes, **kwargs: Any) -> dict[str, str]:
        return sign_fal(self.key, job.id, body, **kwargs)

    async def _jwks(self, request: web.Request) -> web.Response:
        return web.json_response({"keys": [jwk(self.key)]})

    async def _submit(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("submit", request)) is not None:
            return answer
        if (denied := self.check_auth(request, "Key")) is not None:
            return denied
        data = await request.json()
        owner, app = request.match_info["owner"], request.match_info["app"].split("/")[0]
        job = self.new_job(data, request.query.get("fal_webhook"), scope=f"{owner}/{app}")
        base = f"{self.url}/{owner}/{app}/requests/{job.id}"
        return web.json_response({
            "request_id": job.id, "response_url": base, "status_url": base + "/status",
            "cancel_url": base + "/cancel", "status": "IN_QUEUE", "queue_position": 0,
        })

    def _job(self, request: web.Request) -> UpJob | None:
        job = self.jobs.get(request.match_info["id"])
        scope = f"{request.match_info['owner']}/{request.match_info['app']}"
        return job if job is not None and job.scope == scope else None

    async def _status(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("status", request)) is not None:
            return answer
        job = self._job(request)
        if job is None or job.expired:
            return web.json_response({"detail": "Request not found"}, status=404)
        if job.state == "queued":
            return web.json_response({"status": "IN_QUEUE", "queue_position": 0, "logs": None},
                                     status=202)
        if job.state == "running":
            logs = [{"message": line} for line in job.logs]
            return web.json_response({"status": "IN_PROGRESS", "logs": logs}, status=202)
        body: dict[str, Any] = {"status": "COMPLETED", "logs": None,
                                "metrics": {"inference_time": 0.5}}
        if job.state == "failed":
            body.update(error="Invalid status code: 422", error_type="ValidationError")
        return web.json_response(body)

    async def _result(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("result", request)) is not None:
            return answer
        job = self._job(request)
        if job is None or job.expired:
            return web.json_response({"detail": "Request not found"}, status=404)
        if job.state == "succeeded":
            return web.json_response(job.output)
        if job.state == "canceled":
            return web.json_response({"detail": "Request cancelled by the client."}, status=499)
        if job.state == "failed":
            return web.json_response({"detail": self.detail(job)}, status=422)
        return web.json_response({"detail": "Request is still in progress"}, status=400)

    async def _cancel(self, request: web.Request) -> web.Response:
        if (answer := self.faulted("cancel", request)) is not None:
            return answer
        job = self._job(request)
        if job is None:
            return web.json_response({"status": "NOT_FOUND"}, status=404)
        if not self.cancel_job(job):
            return web.json_response({"status": "ALREADY_COMPLETED"}, status=400)
        return web.json_response({"status": "CANCELLATION_REQUESTED"}, status=202)

    def echo(self, job: UpJob) -> Any:
        value = super().echo(job)
        if job.input.get("output_kind") in ("file", "files"):
            return {"file": {"url": value, "content_type": "text/plain"}}
        return value
