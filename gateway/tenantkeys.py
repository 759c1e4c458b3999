"""The secrets of each tenant, read or made once at start (docs/security.md).

Each tenant signs its webhooks and its stream URLs with its own ``whsec_`` secret, the
one ``GET /v1/webhooks/default/secret`` gives its tokens: ``default``'s is the gateway's
(``[webhooks] signing_secret``, or the one kept in the store: unchanged), a
``[[tenants]]`` entry's is its ``webhook_signing_secret``, else one generated once and
kept in the store under ``webhook_signing_secret:<name>``, shared by every process.
Signed file downloads are keyed by :func:`download_key`, which no tenant is given.
"""

from __future__ import annotations

import hashlib
import hmac

from contracts.auth import DEFAULT_TENANT
from gateway import assembly
from gateway.clock import Clock
from gateway.config import Settings
from gateway.store import secrets
from gateway.store.aio import Engine
from gateway.store.jobs import JobStore
from gateway.tenants import SECRET_ROW_PREFIX
from gateway.webhooks import signing
from gateway.webhooks.signers import TenantSigners

__all__ = ["GATEWAY_SECRET_ROW", "download_key", "signers", "signing_secrets"]

GATEWAY_SECRET_ROW = "webhook_signing_secret"  # noqa: S105 (a row name, not a secret)


async def signing_secrets(engine: Engine, settings: Settings, clock: Clock) -> dict[str, str]:
    """Tenant name -> its signing secret, ``default``'s (the gateway's) among them."""
    found = {DEFAULT_TENANT: await _gateway_secret(engine, settings, clock)}
    for tenant in settings.tenants:
        configured = tenant.webhook_signing_secret
        found[tenant.name] = configured.get_secret_value() if configured else (
            await secrets.get_or_create(engine, SECRET_ROW_PREFIX + tenant.name,
                                        signing.generate_secret, clock=clock))
    return found


async def _gateway_secret(engine: Engine, settings: Settings, clock: Clock) -> str:
    """``default``'s: the configured ``[webhooks] signing_secret``, else one generated
    once and kept in the store, so every gateway process sharing it signs alike."""
    if settings.webhooks.signing_secret is not None:
        return settings.webhooks.signing_secret.get_secret_value()
    return await secrets.get_or_create(
        engine, GATEWAY_SECRET_ROW, signing.generate_secret, clock=clock
    )


def signers(found: dict[str, str], settings: Settings, store: JobStore) -> TenantSigners:
    """The webhook signers of :func:`signing_secrets`' secrets (a prediction's tenant
    read from ``store``); ``[webhooks]``'s rotation overlap (``previous_signing_secret``)
    is ``default``'s."""
    made = {name: signing.Signer(secret) for name, secret in found.items()}
    made[DEFAULT_TENANT] = assembly.webhook_signer(found[DEFAULT_TENANT], settings.webhooks)

    async def tenant_of(job_id: str) -> str:
        return (await store.get(job_id)).tenant

    return TenantSigners(made, tenant_of)


def download_key(secret: str) -> str:
    """The key of signed file-download URLs, derived from the gateway's secret: a tenant
    holding that secret (``default``) still cannot sign another's file downloads."""
    return hmac.new(secret.encode(), b"cutover file downloads", hashlib.sha256).hexdigest()
