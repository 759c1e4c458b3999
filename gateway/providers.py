"""The configured providers: one adapter and one concurrency limit per name.

``[providers.NAME] kind`` picks the adapter (docs/providers.md). Credentials come from
the environment variable named by ``token_env``, read here, once, when the app starts;
:func:`missing_credentials` lists the unset ones for ``cutover check``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from adapters import tls
from adapters.port import Adapter
from contracts.errors import ConfigurationError
from contracts.job import Job
from contracts.snapshot import ProviderRef

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Provider",
    "build_adapter",
    "callback_url",
    "credential",
    "file_hosts",
    "missing_credentials",
    "provider_ref",
]

#: Where each hosted provider serves output files by default (copied at completion).
DEFAULT_FILE_HOSTS: Mapping[str, tuple[str, ...]] = {
    "fal": ("fal.media", "*.fal.media"),
    "replicate": ("replicate.delivery", "*.replicate.delivery"),
}


def callback_url(base_url: str, job: Job, token: str) -> str:
    """The provider-webhook URL of ``job``: its provider, id and unguessable token."""
    return f"{base_url}/provider-webhooks/{job.provider}/{job.id}/{token}"


def provider_ref(job: Job) -> ProviderRef:
    """How to address ``job`` upstream again."""
    assert job.provider_job_id is not None
    return ProviderRef(
        job_id=job.id, provider_job_id=job.provider_job_id, input=job.input,
        submitted_at=job.submitted_at, target=job.target,
    )


@dataclass(frozen=True)
class Provider:
    """A named upstream: its adapter, how many jobs it may run at once, and how long, in
    seconds, a job's submit may find no connection to it before the job fails."""

    name: str
    adapter: Adapter
    max_concurrency: int
    submit_timeout_s: float = 300.0

    def first_check_at(self, now: datetime) -> datetime | None:
        """When a job this provider just accepted is first polled: ``now`` plus the
        adapter's ``fetch_interval_s``; None for a provider that cannot be asked (the
        job waits for its webhook and the reaper's deadline; docs/lifecycle.md)."""
        caps = self.adapter.capabilities
        return now + timedelta(seconds=caps.fetch_interval_s) if caps.fetch else None


def credential(token_env: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The credential in the environment variable ``token_env`` (``environ``, default
    ``os.environ``); None when no variable is named or it is unset or empty."""
    env = os.environ if environ is None else environ
    return (env.get(token_env) or None) if token_env else None


def missing_credentials(
    token_envs: Mapping[str, str | None], environ: Mapping[str, str]
) -> list[str]:
    """``"NAME needs $VAR"`` for every provider (name -> ``token_env``) whose variable is
    unset or empty."""
    return [
        f"provider {name!r} needs its credential in ${token_env} (token_env), which is "
        "not set"
        for name, token_env in token_envs.items()
        if token_env and not environ.get(token_env)
    ]


def file_hosts(kind: str, base_url: str = "", configured: Sequence[str] = ()) -> list[str]:
    """The hosts whose URLs in outputs are files to copy: ``configured``, else the
    provider kind's own file hosts (and, for ``replicate``, the host of its ``base_url``)."""
    if configured:
        return list(configured)
    hosts = list(DEFAULT_FILE_HOSTS.get(kind, ()))
    if kind == "replicate" and base_url:
        hosts.append(urlsplit(base_url).hostname or "")
    return [h for h in hosts if h]


def build_adapter(
    name: str,
    kind: str,
    *,
    base_url: str = "",
    token: str | None = None,
    webhook_auth_token: str | None = None,
    request_timeout_s: float | None = None,
    fetch_interval_s: float | None = None,
    fetch_max_interval_s: float | None = None,
    lost_grace_s: float | None = None,
    rate_limit_per_s: float | None = None,
    api: str | None = None,
    stream: bool | None = None,
    jwks_url: str | None = None,
    ca_file: str | None = None,
    result_retry_window_s: float | None = None,
    held: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Adapter:
    """The adapter of ``kind`` named ``name`` (no I/O: clients are opened lazily).

    The arguments are ``[providers.NAME]``'s (docs/providers.md), ``token`` the
    credential itself (:func:`credential`). None (or ``""``) leaves the adapter's own
    default: nothing here restates one. ``transport`` replaces the network for the
    adapter's HTTP client (``cutover routes translate`` captures the request with it).

    Raises
    ------
    ConfigurationError
        For a kind this build does not know, or a ``ca_file`` that cannot be used.
    """
    if ca_file is not None and (why := tls.ca_file_problem(ca_file)) is not None:
        raise ConfigurationError(f"provider {name!r}: ca_file = {ca_file}: {why}")
    options = _given(
        request_timeout_s=request_timeout_s, fetch_interval_s=fetch_interval_s,
        fetch_max_interval_s=fetch_max_interval_s, ca_file=ca_file, transport=transport,
    )
    if kind == "cog" and held:
        from adapters.cog_held import HeldCogAdapter

        return HeldCogAdapter(
            name=name, base_url=base_url, webhook_auth_token=webhook_auth_token,
            **options, **_given(lost_grace_s=lost_grace_s),
        )
    if kind == "cog":
        from adapters.cog import CogAdapter

        return CogAdapter(
            name=name, base_url=base_url, webhook_auth_token=webhook_auth_token,
            **options, **_given(lost_grace_s=lost_grace_s),
        )
    if kind == "fake" and base_url:
        from adapters.remote_fake import RemoteFakeAdapter

        secret = webhook_auth_token or "fake-secret"
        return RemoteFakeAdapter(name=name, base_url=base_url, secret=secret, **options)
    if kind == "fake":
        from adapters.fake import FakeAdapter

        options.pop("request_timeout_s", None)
        options.pop("ca_file", None)
        options.pop("transport", None)
        return FakeAdapter(name=name, **options)
    hosted = _given(base_url=base_url or None, rate_limit_per_s=rate_limit_per_s)
    if kind == "fal":
        from adapters.fal import FalAdapter

        return FalAdapter(name=name, token=token, **options, **hosted,
                          **_given(jwks_url=jwks_url, result_retry_window_s=result_retry_window_s))
    if kind == "runpod":
        from adapters.runpod import RunPodAdapter

        return RunPodAdapter(name=name, token=token, **options, **hosted)
    if kind == "openai":
        from adapters.openai import OpenAIAdapter

        extra = _given(lost_grace_s=lost_grace_s, api=api, stream=stream)
        return OpenAIAdapter(name=name, token=token, **options, **hosted, **extra)
    if kind == "replicate":
        from adapters.replicate import ReplicateAdapter

        return ReplicateAdapter(name=name, token=token, **options, **hosted)
    raise ConfigurationError(f"provider {name!r} has unknown kind {kind!r}")


def _given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None)."""
    return {key: value for key, value in values.items() if value is not None}
