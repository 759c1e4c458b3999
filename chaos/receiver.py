"""The app's webhook receiver in a chaos run: records every delivery, sometimes fails.

Each prediction's ``webhook`` URL is ``{base}/hooks?fail_s=S``: with ``S > 0`` the
receiver answers 503 to that prediction's deliveries for ``S`` seconds after the first
one arrives ("a receiver failing for a while"), then 200. Every attempt is recorded with
whether its Standard Webhooks signature verified against the gateway's signing secret
(docs/webhooks.md), so the checks can count distinct ``webhook-id`` values per prediction.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass

from aiohttp import web
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

__all__ = ["Delivery", "Receiver"]


@dataclass(frozen=True)
class Delivery:
    """One attempt as the receiver saw it (``at`` is ``time.monotonic()``)."""

    prediction_id: str
    webhook_id: str
    status: str
    at: float
    signed: bool
    answered: int
    body: dict[str, object]


class Receiver:
    """Collects deliveries per prediction id; serve it with :meth:`app`."""

    def __init__(self, signing_secret: str) -> None:
        self._webhook = Webhook(signing_secret)
        self.deliveries: dict[str, list[Delivery]] = defaultdict(list)
        self.refused = 0
        self.unreadable = 0
        self.signatures: set[str] = set()
        self.arrived = asyncio.Event()
        self._first_seen: dict[str, float] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hooks", self._hook)
        return app

    async def _hook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        now = time.monotonic()
        for part in request.headers.get("webhook-signature", "").split():
            self.signatures.add(part.partition(",")[2])
        try:
            body = json.loads(raw)
            prediction_id = str(body["id"])
        except (ValueError, KeyError, TypeError):
            self.unreadable += 1
            return web.Response(status=400)
        first = self._first_seen.setdefault(prediction_id, now)
        fail_s = float(request.query.get("fail_s", "0") or 0)
        answered = 503 if now - first < fail_s else 200
        self.refused += answered != 200
        self.deliveries[prediction_id].append(
            Delivery(
                prediction_id=prediction_id,
                webhook_id=request.headers.get("webhook-id", ""),
                status=str(body.get("status")),
                at=now,
                signed=self._verifies(raw, request),
                answered=answered,
                body=body,
            )
        )
        self.arrived.set()
        return web.Response(status=answered)

    def _verifies(self, raw: bytes, request: web.Request) -> bool:
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            self._webhook.verify(raw, headers)
        except WebhookVerificationError:
            return False
        return True
