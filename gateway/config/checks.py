"""What ``cutover check`` and ``serve`` find wrong in a configuration before they use it
(README "Configuration"): things the settings' own validation cannot see, since they
depend on this machine (a storage directory, a listen host that must resolve)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from adapters import tls
from contracts.errors import ConfigurationError
from gateway.config import GatewaySettings, OperatorWebhookSettings, ProviderSettings
from gateway.storage import LocalStorage, open_storage

__all__ = [
    "ca_file_problems", "local_dir", "operator_webhook_problems", "resolvable",
    "storage_problems",
]


def ca_file_problems(providers: Mapping[str, ProviderSettings]) -> list[str]:
    """One line per provider whose ``ca_file`` is missing, unreadable or not PEM (``serve``
    refuses to start with it; docs/providers.md, "TLS to providers")."""
    return [
        f"provider {name!r}: ca_file = {conf.ca_file}: {why} (a PEM file of the CA "
        "certificates that sign the provider's server certificate)"
        for name, conf in providers.items()
        if conf.ca_file is not None and (why := tls.ca_file_problem(conf.ca_file))
    ]


def operator_webhook_problems(conf: OperatorWebhookSettings | None) -> list[str]:
    """``[operator_webhook]``'s secret missing from the environment or malformed (``serve``
    refuses to start with it; docs/webhooks.md, "Operator webhook")."""
    if conf is None:
        return []
    try:
        conf.secret()
    except ConfigurationError as exc:
        return [exc.detail]
    return []


def local_dir(storage_url: str) -> str:
    """`` (the directory /abs/path)`` for a local ``storage_url``: ``file://var/x`` is the
    relative ``var/x``, not ``/var/x``."""
    storage = open_storage(storage_url)
    if not isinstance(storage, LocalStorage) or storage_url.endswith(str(storage.root)):
        return ""
    return f" (the directory {storage.root})"


def storage_problems(gw: GatewaySettings) -> list[str]:
    """A local storage directory that cannot be made or written (every file output and
    upload would fail). Nothing is created here: the closest existing directory is
    looked at."""
    storage = open_storage(gw.storage_url)
    if not isinstance(storage, LocalStorage):
        return []
    existing = next(p for p in (storage.root, *storage.root.parents) if p.exists())
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return []
    why = "is not a directory" if not existing.is_dir() else "is not writable by this user"
    return [f"storage_url {gw.storage_url}: {existing} {why}, so {storage.root} cannot hold "
            "output files"]


def resolvable(gw: GatewaySettings) -> None:
    """A listen host that does not resolve is named as such: its ``gaierror`` was taken
    for the store's ("cannot reach the store at sqlite...")."""
    try:
        socket.getaddrinfo(gw.host, gw.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigurationError(
            f"cannot listen on [gateway] listen = {gw.listen}: {exc.strerror} (the host is "
            "not an address or a name of this machine)"
        ) from exc
