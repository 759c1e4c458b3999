"""The configured providers: one adapter and one concurrency limit per name."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.port import Adapter
from contracts.errors import ConfigurationError
from gateway.config import ProviderSettings

__all__ = ["Provider", "build_adapter"]


@dataclass(frozen=True)
class Provider:
    """A named upstream: its adapter and how many jobs it may run at once."""

    name: str
    adapter: Adapter
    max_concurrency: int


def build_adapter(name: str, settings: ProviderSettings) -> Adapter:
    """The adapter for ``settings.kind`` (no I/O: clients are opened lazily).

    Raises
    ------
    ConfigurationError
        For a kind this build does not know.
    """
    token = settings.webhook_auth_token.get_secret_value() if settings.webhook_auth_token else None
    extra = {}
    if settings.fetch_interval_s:
        extra["fetch_interval_s"] = settings.fetch_interval_s
    if settings.fetch_max_interval_s:
        extra["fetch_max_interval_s"] = settings.fetch_max_interval_s
    if settings.lost_grace_s is not None and settings.kind == "cog":
        extra["lost_grace_s"] = settings.lost_grace_s
    if settings.kind == "cog":
        from adapters.cog import CogAdapter

        return CogAdapter(
            name=name,
            base_url=settings.base_url,
            webhook_auth_token=token,
            request_timeout_s=settings.request_timeout_s,
            **extra,
        )
    if settings.kind == "fake" and settings.base_url:
        from adapters.remote_fake import RemoteFakeAdapter

        return RemoteFakeAdapter(
            name=name,
            base_url=settings.base_url,
            secret=token or "fake-secret",
            request_timeout_s=settings.request_timeout_s,
            **extra,
        )
    if settings.kind == "fake":
        from adapters.fake import FakeAdapter

        return FakeAdapter(name=name, **extra)
    raise ConfigurationError(f"provider {name!r} has unknown kind {settings.kind!r}")
