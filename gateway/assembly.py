"""Pieces the app factory (:mod:`gateway.app`) assembles for the gateway's outer surface:
owned storage from its settings, the reader of providers' model schemas, and each
tenant's secrets (docs/security.md): ``default`` signs with the gateway's secret
(``[webhooks] signing_secret``, else one kept in the store), another tenant with its
``webhook_signing_secret``, else one generated once and kept in the store under
``webhook_signing_secret:<name>``; signed file downloads use :func:`download_key`, which
no tenant is given; the operator webhook (docs/webhooks.md, "Operator webhook") signs with
the secret in ``[operator_webhook] secret_env``. Only :func:`open_routes` and
:func:`signing_secrets` do I/O."""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any, cast

from contracts.auth import DEFAULT_TENANT
from contracts.errors import ConfigurationError, CutoverError
from contracts.job import Job
from gateway.clock import Clock
from gateway.config import Settings, WebhookSettings
from gateway.config.tenants import SECRET_ROW_PREFIX
from gateway.files.outputs import OutputCopier
from gateway.files.uploads import Uploads
from gateway.finalizer import Finalizer
from gateway.intake import Intake
from gateway.legacy.adoption import Adopter, LegacyLookup
from gateway.providers import Provider, file_hosts
from gateway.retention import Retention
from gateway.rollout import wiring as routewiring
from gateway.storage import Storage, open_storage
from gateway.store import secrets
from gateway.store.engine.aio import Engine
from gateway.store.jobs import JobStore
from gateway.store.operatorhook import OperatorOutbox
from gateway.store.retention import RetentionStore
from gateway.store.sessions import ConsoleSessions
from gateway.translation.conformance import OutputContract
from gateway.translation.translator import Translator
from gateway.validation import Schemas
from gateway.webhooks import signing
from gateway.webhooks.signers import TenantSigners

__all__ = [
    "adopter", "download_key", "open_routes", "operator_outbox", "operator_signer",
    "output_file_hosts", "retention_loop",
    "schema_fetcher", "signers", "signing_secrets", "storage_for", "translator", "uploads",
    "webhook_signer",
]

_GATEWAY_SECRET_ROW = "webhook_signing_secret"  # noqa: S105 (a row name, not a secret)


def output_file_hosts(settings: Settings) -> dict[str, list[str]]:
    """Provider name -> the hosts whose URLs in its outputs are files to copy."""
    return {
        name: file_hosts(conf.kind, conf.base_url, conf.file_hosts)
        for name, conf in settings.providers.items()
    }


def webhook_signer(secret: str, settings: WebhookSettings) -> signing.Signer:
    """The signer of outbound webhooks: ``secret``, and ``[webhooks]``'s previous secret
    until ``previous_valid_until`` (rotation, docs/webhooks.md).

    Raises
    ------
    contracts.errors.ConfigurationError
        A malformed secret (see :class:`gateway.webhooks.signing.Signer`).
    """
    previous = settings.previous_signing_secret
    return signing.Signer(
        secret,
        previous_secret=previous.get_secret_value() if previous is not None else None,
        previous_valid_until=settings.previous_valid_until,
    )


def storage_for(settings: Settings) -> Storage:
    """The owned storage of ``[gateway] storage_url`` with the ``[storage]`` options."""
    conf = settings.storage
    return open_storage(
        settings.gateway.storage_url,
        endpoint_url=conf.endpoint_url,
        region=conf.region,
        access_key_id=conf.access_key_id.get_secret_value() if conf.access_key_id else None,
        secret_access_key=(
            conf.secret_access_key.get_secret_value() if conf.secret_access_key else None
        ),
        part_size_bytes=conf.part_size_bytes,
        fsync=conf.fsync,
    )


def uploads(
    settings: Settings, copier: OutputCopier, storage: Storage, store: JobStore
) -> Uploads:
    """The receiver of provider uploads (Cog's ``--upload-url``): the providers with an
    ``upload_token`` take them (gateway/files/uploads.py)."""
    tokens = {
        name: conf.upload_token.get_secret_value()
        for name, conf in settings.providers.items()
        if conf.upload_token is not None
    }
    return Uploads(copier=copier, storage=storage, store=store, tokens=tokens)


def schema_fetcher(
    providers: Callable[[], dict[str, Provider]],
) -> Callable[[str, str], Awaitable[dict[str, Any]]]:
    """A route's schema from its provider (``openapi_schema = "provider"``, or none given):
    ask the provider's adapter for the document of ``target``.

    ``providers`` gives the running adapters (they exist only once the app has started).
    """

    async def fetch(provider_name: str, target: str) -> dict[str, Any]:
        adapter = providers()[provider_name].adapter
        reader = getattr(adapter, "model_schema", None)
        if reader is None:
            raise ConfigurationError(f"provider {provider_name!r} serves no model schema")
        try:
            document: dict[str, Any] = await reader(target)
        except CutoverError as exc:
            raise ConfigurationError(
                f"the model schema of provider {provider_name!r} is unavailable: {exc.detail}"
            ) from exc
        return document

    return fetch


def output_contract(settings: Settings, schemas: Schemas) -> OutputContract:
    """Each route's ``Output`` schema, checked by the finalizer
    (gateway/translation/conformance.py)."""
    return OutputContract(settings.routes, schemas.document, schemas.cached, schemas.held)


def retention_loop(app: Any, store: RetentionStore) -> Retention:
    """The retention loop of ``[retention]`` (docs/retention.md) over ``store``."""
    from gateway.http import files, keys  # the keys name this module's own types

    conf = app[keys.SETTINGS].retention
    return Retention(
        store=store, files=app[files.FILES], storage=app[keys.STORAGE],
        notifier=app[keys.NOTIFIER], outbox_age_s=conf.outbox_age_s,
        events_age_s=conf.provider_events_age_s, data_retention_s=conf.data_retention_s,
        batch=conf.batch, interval_s=conf.interval_s, clock=app[keys.CLOCK],
    )


async def open_routes(app: Any, engine: Any) -> None:
    """Routes as data and shadows (docs/canary.md): seed, load, and keep the services
    under ``keys.ROUTES`` of ``app``; the console's sessions (docs/console.md) under
    ``keys.CONSOLE_SESSIONS``."""
    from gateway.http import keys  # the keys name this module's own types

    settings = app[keys.SETTINGS]
    app[keys.CONSOLE_SESSIONS] = ConsoleSessions(
        engine, idle_s=settings.admin.session_idle_s, max_s=settings.admin.session_max_s,
        clock=app[keys.CLOCK],
    )
    app[keys.ROUTES] = await routewiring.open_routes(
        engine, app[keys.ROUTER], app[keys.NOTIFIER], app[keys.METRICS], app[keys.STORAGE],
        providers=list(settings.providers), public_url=settings.gateway.public_url,
        poll_interval_s=settings.gateway.route_poll_interval_s, clock=app[keys.CLOCK],
        operator=operator_outbox(settings),
    )


def operator_outbox(settings: Settings) -> OperatorOutbox | None:
    """Where live route changes are announced (``[operator_webhook]``), or None."""
    conf = settings.operator_webhook
    return None if conf is None else OperatorOutbox(conf.url, tuple(conf.events))


def operator_signer(settings: Settings) -> signing.Signer | None:
    """The signer of operator webhook events, or None without ``[operator_webhook]``.

    Raises
    ------
    contracts.errors.ConfigurationError
        ``secret_env`` unset or not a ``whsec_`` secret (the message names the setting).
    """
    conf = settings.operator_webhook
    return None if conf is None else signing.Signer(conf.secret())


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
        engine, _GATEWAY_SECRET_ROW, signing.generate_secret, clock=clock
    )


def signers(
    found: dict[str, str], settings: Settings, read_job: Callable[[str], Awaitable[Job]]
) -> TenantSigners:
    """The webhook signers of :func:`signing_secrets`' secrets (a prediction's tenant
    from ``read_job``, a store read); ``[webhooks]``'s rotation overlap
    (``previous_signing_secret``) is ``default``'s."""
    made = {name: signing.Signer(secret) for name, secret in found.items()}
    made[DEFAULT_TENANT] = webhook_signer(found[DEFAULT_TENANT], settings.webhooks)

    async def tenant_of(job_id: str) -> str:
        return (await read_job(job_id)).tenant

    return TenantSigners(made, tenant_of)


def download_key(secret: str) -> str:
    """The key of signed file-download URLs, derived from the gateway's secret: a tenant
    holding that secret (``default``) still cannot sign another's file downloads."""
    return hmac.new(secret.encode(), b"cutover file downloads", hashlib.sha256).hexdigest()


def adopter(app: Any, engine: Any, finalizer: Finalizer) -> Adopter | None:
    """The adopter of ``[gateway] legacy_provider``'s predictions (docs/cutover-day.md),
    or None without one."""
    from gateway.http import keys  # the keys name this module's own types

    gw = app[keys.SETTINGS].gateway
    name = gw.legacy_provider
    if name is None:
        return None
    return Adopter(
        provider=name,  # kind "replicate" (the settings check): a ReplicateAdapter
        adapter=lambda: cast(LegacyLookup, app[keys.PROVIDERS][name].adapter),
        engine=engine, finalizer=finalizer, notifier=app[keys.NOTIFIER],
        lookups_per_s=gw.legacy_lookups_per_s, burst=gw.legacy_lookup_burst,
        unknown_ttl_s=gw.legacy_unknown_ttl_s, clock=app[keys.CLOCK],
    )


def translator(app: Any) -> Translator:
    """The maps of the app's routes, with each adapter's default input map
    (docs/translation.md); after the providers are open."""
    from gateway.http import keys  # the keys name this module's own types

    providers = app[keys.PROVIDERS]
    defaults = {name: p.adapter.capabilities.input_map for name, p in providers.items()}
    router = app[keys.ROUTER]
    return Translator(lambda key: router.spec(key).maps, defaults)


def attach_answers(providers: dict[str, Provider], intake: Intake) -> None:
    """Hand each adapter that holds its predictions (``attach_answers``: a held Cog,
    docs/cog.md §3) the intake its answers are applied through."""
    for provider in providers.values():
        if callable(attach := getattr(provider.adapter, "attach_answers", None)):
            attach(functools.partial(intake.accept_own, provider))
