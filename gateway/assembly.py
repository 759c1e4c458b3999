"""Pieces the app factory (:mod:`gateway.app`) assembles for the gateway's outer surface:
API token names, owned storage from its settings, and the reader of providers' model
schemas. No I/O here; each piece does its own when used."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from contracts.errors import ConfigurationError, CutoverError
from gateway.config import Settings, WebhookSettings
from gateway.conformance import OutputContract
from gateway.files.outputs import OutputCopier
from gateway.files.uploads import Uploads
from gateway.providers import Provider, file_hosts
from gateway.retention import Retention
from gateway.rollout import wiring as routewiring
from gateway.storage import Storage, open_storage
from gateway.store.jobs import JobStore
from gateway.store.retention import RetentionStore
from gateway.store.sessions import ConsoleSessions
from gateway.validation import Schemas
from gateway.webhooks import signing

__all__ = [
    "api_tokens", "open_routes", "output_file_hosts", "retention_loop", "schema_fetcher",
    "storage_for", "uploads", "webhook_signer",
]


def api_tokens(settings: Settings) -> dict[str, str]:
    """Name -> token: ``named_api_tokens`` as named, ``api_tokens`` as ``token-N``."""
    gw = settings.gateway
    tokens = {f"token-{i}": t.get_secret_value() for i, t in enumerate(gw.api_tokens, 1)}
    tokens.update({n: t.get_secret_value() for n, t in gw.named_api_tokens.items()})
    return tokens


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
    """Each route's ``Output`` schema, checked by the finalizer (gateway/conformance.py)."""
    return OutputContract(settings.routes, schemas.document, schemas.cached)


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
    )
