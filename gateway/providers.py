"""The configured providers: one adapter and one concurrency limit per name.

``[providers.NAME] kind`` picks the adapter (docs/providers.md). Credentials come from
the environment variable named by ``token_env``, read here, once, when the app starts;
:func:`missing_credentials` lists the unset ones for ``cutover check``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from adapters.port import Adapter
from contracts.errors import ConfigurationError
from gateway.config import ProviderSettings, Settings

__all__ = ["Provider", "build_adapter", "file_hosts", "missing_credentials"]

#: Where each hosted provider serves output files by default (copied at completion).
DEFAULT_FILE_HOSTS: Mapping[str, tuple[str, ...]] = {
    "fal": ("fal.media", "*.fal.media"),
    "replicate": ("replicate.delivery", "*.replicate.delivery"),
}


@dataclass(frozen=True)
class Provider:
    """A named upstream: its adapter and how many jobs it may run at once."""

    name: str
    adapter: Adapter
    max_concurrency: int

    def first_check_at(self, now: datetime) -> datetime | None:
        """When a job this provider just accepted is first polled: ``now`` plus the
        adapter's ``fetch_interval_s``; None for a provider that cannot be asked (the
        job waits for its webhook and the reaper's deadline; docs/lifecycle.md)."""
        caps = self.adapter.capabilities
        return now + timedelta(seconds=caps.fetch_interval_s) if caps.fetch else None


def missing_credentials(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """``"NAME needs $VAR"`` for every provider whose ``token_env`` is unset or empty."""
    return [
        f"provider {name!r} needs its credential in ${conf.token_env} (token_env), which is "
        "not set"
        for name, conf in settings.providers.items()
        if conf.token_env and not environ.get(conf.token_env)
    ]


def file_hosts(conf: ProviderSettings) -> list[str]:
    """The hosts whose URLs in outputs are files to copy: configured, else the
    provider's own file hosts (and, for ``replicate``, the host of its ``base_url``)."""
    if conf.file_hosts:
        return list(conf.file_hosts)
    hosts = list(DEFAULT_FILE_HOSTS.get(conf.kind, ()))
    if conf.kind == "replicate" and conf.base_url:
        hosts.append(urlsplit(conf.base_url).hostname or "")
    return [h for h in hosts if h]


def build_adapter(
    name: str, settings: ProviderSettings, environ: Mapping[str, str] | None = None
) -> Adapter:
    """The adapter for ``settings.kind`` (no I/O: clients are opened lazily).

    ``environ`` (default ``os.environ``) supplies the ``token_env`` credential.

    Raises
    ------
    ConfigurationError
        For a kind this build does not know.
    """
    env = os.environ if environ is None else environ
    common = _common(settings)
    token = env.get(settings.token_env) or None if settings.token_env else None
    if settings.kind == "cog":
        from adapters.cog import CogAdapter

        auth = settings.webhook_auth_token
        if settings.lost_grace_s is not None:
            common["lost_grace_s"] = settings.lost_grace_s
        return CogAdapter(
            name=name, base_url=settings.base_url, request_timeout_s=settings.request_timeout_s,
            webhook_auth_token=auth.get_secret_value() if auth else None, **common,
        )
    if settings.kind == "fake" and settings.base_url:
        from adapters.remote_fake import RemoteFakeAdapter

        auth = settings.webhook_auth_token
        return RemoteFakeAdapter(
            name=name,
            base_url=settings.base_url,
            secret=auth.get_secret_value() if auth else "fake-secret",
            request_timeout_s=settings.request_timeout_s,
            **common,
        )
    if settings.kind == "fake":
        from adapters.fake import FakeAdapter

        return FakeAdapter(name=name, **common)
    hosted = _hosted(name, settings, token, common)
    if hosted is None:
        raise ConfigurationError(f"provider {name!r} has unknown kind {settings.kind!r}")
    return hosted


def _common(settings: ProviderSettings) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if settings.fetch_interval_s:
        extra["fetch_interval_s"] = settings.fetch_interval_s
    if settings.fetch_max_interval_s:
        extra["fetch_max_interval_s"] = settings.fetch_max_interval_s
    return extra


def _hosted(
    name: str, settings: ProviderSettings, token: str | None, common: dict[str, Any]
) -> Adapter | None:
    kwargs: dict[str, Any] = {
        "name": name, "token": token, "request_timeout_s": settings.request_timeout_s,
        "rate_limit_per_s": settings.rate_limit_per_s, **common,
    }
    if settings.base_url:
        kwargs["base_url"] = settings.base_url
    if settings.kind == "fal":
        from adapters.fal import FalAdapter

        if settings.jwks_url:
            kwargs["jwks_url"] = settings.jwks_url
        return FalAdapter(**kwargs)
    if settings.kind == "runpod":
        from adapters.runpod import RunPodAdapter

        return RunPodAdapter(**kwargs)
    if settings.kind == "openai":
        from adapters.openai import OpenAIAdapter

        if settings.lost_grace_s is not None:
            kwargs["lost_grace_s"] = settings.lost_grace_s
        return OpenAIAdapter(api=settings.api, stream=settings.stream, **kwargs)
    if settings.kind == "replicate":
        from adapters.replicate import ReplicateAdapter

        return ReplicateAdapter(**kwargs)
    return None
