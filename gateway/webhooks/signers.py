"""Each tenant's webhook signer (docs/security.md, docs/webhooks.md).

A webhook is signed with the secret of its prediction's tenant, so that one tenant's
secret (``GET /v1/webhooks/default/secret`` gives each its own) verifies none of another's
webhooks. :class:`TenantSigners` finds the tenant of a delivery's prediction through
``tenant_of`` (a store read; a prediction's tenant never changes, so the answer is kept,
for at most :data:`KEPT` predictions); with one tenant it reads nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

from contracts.auth import DEFAULT_TENANT
from gateway.webhooks.signing import Signer

__all__ = ["KEPT", "TenantSigners"]

KEPT = 4096
"""Predictions whose tenant is remembered (the least recently used forgotten first)."""


class TenantSigners:
    """``signers`` by tenant name (``default`` among them); ``tenant_of(job_id)`` reads a
    prediction's tenant. A tenant without a signer (removed from the configuration) is
    signed for by ``default``'s."""

    def __init__(
        self, signers: Mapping[str, Signer],
        tenant_of: Callable[[str], Awaitable[str]] | None = None,
    ) -> None:
        self._signers = dict(signers)
        self._default = self._signers[DEFAULT_TENANT]
        self._tenant_of = tenant_of if len(self._signers) > 1 else None
        self._known: OrderedDict[str, str] = OrderedDict()

    async def signer_for(self, job_id: str) -> Signer:
        """The signer of the webhooks of prediction ``job_id``."""
        if self._tenant_of is None:
            return self._default
        tenant = self._known.get(job_id)
        if tenant is None:
            tenant = await self._tenant_of(job_id)
            self._known[job_id] = tenant
            if len(self._known) > KEPT:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(job_id)
        return self._signers.get(tenant, self._default)
