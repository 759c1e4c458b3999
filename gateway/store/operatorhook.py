"""The operator webhook's outbox rows (docs/webhooks.md, "Operator webhook").

:meth:`OperatorOutbox.write` runs inside the transaction of a live route change
(:meth:`gateway.store.routes.RouteBook.change`), after its audit row: the event exists if
and only if the change was committed, once per change whichever process made it. The row
is an ordinary ``outbox`` row with no ``job_id`` and the event ``operator``: the delivery
loop (:mod:`gateway.webhooks.delivery`) claims, signs (the operator secret), retries and
dead-letters it as it does an app's ``completed`` event. A receiver that fails never
blocks or undoes the change: only the send waits.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gateway import wire
from gateway.rollout import announce
from gateway.rollout.spec import AuditEntry
from gateway.store.engine.aio import Connection
from gateway.store.outbox import new_msg_id
from gateway.store.records import DeliveryStatus
from gateway.store.schema import outbox

__all__ = ["OperatorOutbox"]


@dataclass(frozen=True)
class OperatorOutbox:
    """Where route changes are announced: ``url`` (``[operator_webhook] url``) and the
    event types sent (``events``, of :data:`gateway.rollout.announce.EVENT_TYPES`; empty:
    all of them)."""

    url: str
    events: Collection[str] = ()

    def wants(self, action: str) -> bool:
        """Whether a change audited with ``action`` is announced."""
        return not self.events or announce.event_type(action) in self.events

    async def write(self, conn: Connection, entry: AuditEntry) -> str | None:
        """Enqueue the event of ``entry`` on ``conn`` (the change's transaction), due at
        once; its ``webhook-id`` comes back (None: a type not wanted, nothing written)."""
        if not self.wants(entry.action):
            return None
        msg_id = new_msg_id()
        payload = wire.compact_json(announce.body(entry)).decode()
        await conn.execute(outbox.insert().values(
            msg_id=msg_id, job_id=None, event=announce.OUTBOX_EVENT, url=self.url,
            payload=payload, status=DeliveryStatus.PENDING, attempts=0,
            created_at=entry.at, next_attempt_at=entry.at,
        ))
        return msg_id
