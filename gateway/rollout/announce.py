"""The operator webhook's events: what a route change tells operators (docs/webhooks.md,
"Operator webhook").

Pure: :func:`event_type` names a change by its audit action and :func:`body` builds the
JSON an operator's receiver gets, in the Standard Webhooks payload shape (``type``,
``timestamp``, ``data``). The store writes it to the outbox in the change's own
transaction (:mod:`gateway.store.operatorhook`); the delivery loop signs and sends it.
"""

from __future__ import annotations

from typing import Any

from gateway.rollout.spec import AuditEntry

__all__ = ["EVENT_TYPES", "OUTBOX_EVENT", "body", "event_type"]

#: The outbox ``event`` of every operator webhook row (its ``job_id`` is NULL).
OUTBOX_EVENT = "operator"

#: Audit action -> event type; any other live change is ``route.changed``.
_BY_ACTION = {
    "set-canary": "route.canary_changed",
    "set-shadow": "route.shadow_changed",
    "rollback": "route.rolled_back",
    "promote": "route.promoted",
    "pause-guard": "route.guard_paused",
    "resume-guard": "route.guard_resumed",
    "set-map": "route.maps_changed",
    "rescue": "route.rescued",
}
_OTHER = "route.changed"

#: Every event type the operator webhook sends (``[operator_webhook] events`` picks some).
EVENT_TYPES = (*_BY_ACTION.values(), _OTHER)


def event_type(action: str) -> str:
    """The event type of a change audited with ``action`` (``rollback`` ->
    ``route.rolled_back``; ``update``, a PATCH of policy, candidate or thresholds, and any
    other -> ``route.changed``)."""
    return _BY_ACTION.get(action, _OTHER)


def body(entry: AuditEntry) -> dict[str, Any]:
    """The event of audit entry ``entry``, JSON-ready.

    ``{"type", "timestamp", "data": {"audit_id", "route", "action", "actor", "reason",
    "changed", "before", "after", "evidence"}}``: ``timestamp`` is the change's time (ISO
    8601, UTC), ``actor`` the audit's ``who`` (an admin token's name, ``cli`` or
    ``guard``), ``changed`` the spec fields that differ, ``evidence`` the guard's reason
    class and samples or a rollback's ``rescued`` summary (None when there is none).
    """
    before = entry.before or {}
    changed = sorted(k for k in {*before, *entry.after} if before.get(k) != entry.after.get(k))
    return {
        "type": event_type(entry.action),
        "timestamp": entry.at.isoformat(),
        "data": {
            "audit_id": entry.id,
            "route": entry.route,
            "action": entry.action,
            "actor": entry.who,
            "reason": entry.reason,
            "changed": changed,
            "before": entry.before,
            "after": entry.after,
            "evidence": entry.evidence,
        },
    }
