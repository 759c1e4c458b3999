"""Configuration: parsed once at the edge, then passed down as narrow arguments.

Sources, later ones overriding earlier ones: built-in defaults, the TOML file given to
``cutover serve --config FILE``, then ``CUTOVER_*`` environment variables with ``__``
between nesting levels (``CUTOVER_GATEWAY__PUBLIC_URL``, ``CUTOVER_GATEWAY__API_TOKENS
='["r8_..."]'``). Durations and sizes carry their unit in the name; secrets are
``SecretStr`` and never logged (docs/architecture.md, rule 9).
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from contracts.errors import ConfigurationError
from gateway.config import problems
from gateway.config import tenants as tenancy
from gateway.config.sections import (
    AdminSettings,
    AdminToken,
    FilesSettings,
    LimitSettings,
    LoggingSettings,
    OperatorWebhookSettings,
    RetentionSettings,
    StorageSettings,
    WebhookSettings,
)
from gateway.rollout.spec import RouteSettings

__all__ = [
    "AdminSettings", "AdminToken", "FilesSettings", "GatewaySettings", "LimitSettings",
    "LoggingSettings", "OperatorWebhookSettings", "ProviderSettings", "RetentionSettings",
    "RouteSettings", "Settings", "StorageSettings", "WebhookSettings", "load_settings",
]

_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UPLOAD_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{16,}$")
_TOKEN_RE = re.compile(r"[\x21-\x7e]+")  # what an Authorization header can carry


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GatewaySettings(_Section):
    """``[gateway]``: the listener, the store, the asset storage and API tokens."""

    listen: str = "127.0.0.1:8080"
    public_url: str = "http://127.0.0.1:8080"
    callback_url: str | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    database_url: str = "sqlite+aiosqlite:///./cutover.db"
    database_statement_timeout_s: float = Field(default=60.0, gt=0)  # PostgreSQL (store/engine/db)
    storage_url: str = "file://./cutover-assets"
    api_tokens: list[SecretStr] = Field(default_factory=list)
    named_api_tokens: dict[str, SecretStr] = Field(default_factory=dict)
    account_username: str = "cutover"
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    body_read_timeout_s: float = Field(default=30.0, gt=0)  # silence: http/deadline.py
    max_output_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    allowed_output_types: list[str] = Field(default_factory=list)
    output_download_timeout_s: float = Field(default=60.0, gt=0)
    max_provider_webhook_bytes: int | None = Field(default=None, gt=0)
    prefer_wait_max_s: float = Field(default=60.0, gt=0, le=60.0)
    max_job_lifetime_s: float = Field(default=1800.0, gt=0)
    submit_timeout_s: float = Field(default=300.0, gt=0)  # unreached provider: dispatcher
    lease_s: float = Field(default=30.0, gt=0)
    loop_interval_s: float = Field(default=0.5, gt=0)
    loop_max_idle_s: float = Field(default=10.0, gt=0)
    dispatch_backoff_base_s: float = Field(default=0.2, gt=0)
    dispatch_backoff_max_s: float = Field(default=5.0, gt=0)
    cancel_grace_s: float = Field(default=30.0, gt=0)
    cancel_resend_s: float = Field(default=2.0, gt=0)
    stream_poll_s: float = Field(default=1.0, gt=0)
    stream_keepalive_s: float = Field(default=15.0, gt=0, lt=30.0)
    route_poll_interval_s: float = Field(default=1.0, gt=0, le=1.5)
    guard_interval_s: float = Field(default=5.0, gt=0, le=50.0)
    legacy_provider: str | None = None  # adopts unknown ids (docs/cutover-day.md)
    legacy_lookups_per_s: float = Field(default=2.0, gt=0)
    legacy_lookup_burst: int = Field(default=20, ge=1)
    legacy_unknown_ttl_s: float = Field(default=60.0, ge=0)
    read_concurrency: int | None = Field(default=None, gt=0)  # http/readlane.py
    listen_backlog: int = Field(default=1024, gt=0)  # accept queue (net.core.somaxconn caps it)

    @model_validator(mode="before")
    @classmethod
    def _default_public_url(cls, data: Any) -> Any:
        """Without ``public_url``, apps reach the gateway where it listens."""
        if isinstance(data, dict) and not data.get("public_url") and data.get("listen"):
            host, _, port = str(data["listen"]).rpartition(":")
            host = "127.0.0.1" if host in {"0.0.0.0", "::", "[::]"} else host  # noqa: S104
            scheme = "https" if data.get("tls_cert_file") else "http"
            data = {**data, "public_url": f"{scheme}://{host}:{port}"}
        return data

    @field_validator("tls_cert_file", "tls_key_file", "callback_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``CUTOVER_GATEWAY__TLS_CERT_FILE=`` unsets the key (it read as the directory ".")."""
        return None if value == "" else value

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"listen must be host:port, got {value!r}")
        if int(port) > 65535:  # uvloop bound the port modulo 65536 (99999: 34463)
            raise ValueError(f"listen port must be 0 to 65535, got {value!r}")
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"an IPv6 address goes in brackets, [::1]:8080; got {value!r}")
        return value

    @field_validator("named_api_tokens")
    @classmethod
    def _names_storable(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        """A token's name owns what it creates (jobs.owner, files.owner: 64 characters, a
        longer one made each create a 500 on PostgreSQL; README "Configuration")."""
        for name in value:
            if not name or len(name) > 64:
                shown = repr(name[:64]) + ("..." if len(name) > 64 else "")
                raise ValueError(f"the token name {shown} is empty or longer than 64 "
                                 "characters (predictions and files store it as their owner)")
        return value

    @field_validator("public_url", "callback_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise ValueError(f"must be an absolute http(s) URL, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _tls_pair(self) -> GatewaySettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        return self

    @property
    def host(self) -> str:
        """The address to bind: an IPv6 one without its brackets (``[::]:8080``: ``::``)."""
        return self.listen.rpartition(":")[0].removeprefix("[").removesuffix("]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def intake_limit(self) -> int:
        """Largest provider webhook body, in bytes: ``max_provider_webhook_bytes``, else
        room for one ``max_output_bytes`` file as base64 plus 1 MiB of JSON around it."""
        if self.max_provider_webhook_bytes is not None:
            return self.max_provider_webhook_bytes
        return self.max_output_bytes * 4 // 3 + (1 << 20)

    @property
    def webhook_base_url(self) -> str:
        """The base URL providers call back on (``callback_url``, else ``public_url``)."""
        return self.callback_url or self.public_url


class ProviderSettings(_Section):
    """``[providers.NAME]``: one upstream and how to reach it (docs/providers.md).

    ``kind`` picks the adapter. ``base_url`` defaults to the provider's public API (a
    ``cog`` provider needs one). ``token_env`` names the environment variable holding the
    provider's credential; the credential itself is never read from the file.
    ``rate_limit_per_s`` caps this process's requests to the provider. ``api`` and
    ``stream`` apply to ``openai`` providers, ``jwks_url``, ``result_retry_window_s`` to
    ``fal``. ``upload_token``: Cog's ``--upload-url`` (docs/cog.md §1.10), ``held``: its
    held predictions (§3). ``ca_file``, ``submit_timeout_s``: docs/providers.md, "TLS".
    """

    kind: Literal["cog", "fake", "fal", "runpod", "openai", "replicate"]
    base_url: str = ""
    token_env: str | None = None
    max_concurrency: int = Field(default=1, gt=0)
    webhook_auth_token: SecretStr | None = None
    request_timeout_s: float = Field(default=30.0, gt=0)
    fetch_interval_s: float | None = Field(default=None, gt=0)
    fetch_max_interval_s: float | None = Field(default=None, gt=0)
    lost_grace_s: float | None = Field(default=None, ge=0)
    rate_limit_per_s: float | None = Field(default=None, gt=0)
    file_hosts: list[str] = Field(default_factory=list)
    upload_token: SecretStr | None = None
    api: Literal["chat", "completions", "images"] = "chat"
    stream: bool = True
    jwks_url: str | None = None
    ca_file: Path | None = None  # PEM: a private CA, trusted besides certifi's bundle
    submit_timeout_s: float | None = Field(default=None, gt=0)  # else [gateway]'s
    result_retry_window_s: float | None = Field(default=None, ge=0)  # fal's result reads
    held: bool = False

    def adapter_options(self) -> dict[str, Any]:
        """This section as :func:`gateway.providers.build_adapter`'s keyword arguments
        (plain values; the credential is read from ``token_env`` by the caller)."""
        auth = self.webhook_auth_token
        return {
            "base_url": self.base_url, "held": self.held,
            "webhook_auth_token": auth.get_secret_value() if auth else None,
            "request_timeout_s": self.request_timeout_s, "fetch_interval_s": self.fetch_interval_s,
            "fetch_max_interval_s": self.fetch_max_interval_s, "lost_grace_s": self.lost_grace_s,
            "rate_limit_per_s": self.rate_limit_per_s, "api": self.api, "stream": self.stream,
            "jwks_url": self.jwks_url, "result_retry_window_s": self.result_retry_window_s,
            "ca_file": str(self.ca_file) if self.ca_file is not None else None,
        }

    @model_validator(mode="after")
    def _needs_url(self) -> ProviderSettings:
        if self.kind == "cog" and not self.base_url:
            raise ValueError("a cog provider needs base_url")
        if self.held and self.kind != "cog":  # docs/cog.md §3
            raise ValueError(f"held = true applies to cog providers only, not {self.kind!r}")
        if self.base_url:
            parts = urlsplit(self.base_url)
            if parts.scheme not in {"http", "https"} or not parts.netloc:
                raise ValueError(f"base_url must be an absolute http(s) URL, got {self.base_url!r}")
        token = self.upload_token.get_secret_value() if self.upload_token else None
        if token is not None and not _UPLOAD_TOKEN_RE.match(token):
            raise ValueError("upload_token needs at least 16 characters among A-Z a-z 0-9 _ -")
        if self.token_env is not None and not _ENV_NAME_RE.match(self.token_env):
            raise ValueError(
                f"token_env names an environment variable (e.g. FAL_KEY), got {self.token_env!r}"
            )
        return self


class Settings(BaseSettings):
    """The whole configuration. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="CUTOVER_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    operator_webhook: OperatorWebhookSettings | None = None  # docs/webhooks.md
    admin: AdminSettings = Field(default_factory=AdminSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    files: FilesSettings = Field(default_factory=FilesSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    providers: dict[Annotated[str, Field(max_length=64)], ProviderSettings] = Field(
        default_factory=dict)  # at most jobs.provider's 64 characters
    routes: list[RouteSettings] = Field(default_factory=list)
    tenants: list[tenancy.TenantSettings] = Field(default_factory=list)  # gateway/config/tenants.py

    @model_validator(mode="after")
    def _routes_name_providers(self) -> Settings:
        seen: set[tuple[str, str | None]] = set()
        for route in self.routes:
            for name in (route.provider, route.candidate, *route.maps):  # maps.PROVIDER too
                if name is not None and name not in self.providers:
                    raise ValueError(f"route {route.model} names unknown provider {name!r}")
            key = (route.model, route.version)
            if key in seen:
                raise ValueError(f"two routes for {route.model} version {route.version}")
            seen.add(key)
        legacy = self.gateway.legacy_provider
        if legacy is not None and getattr(self.providers.get(legacy), "kind", None) != "replicate":
            raise ValueError(f"[gateway] legacy_provider = {legacy!r} must name a provider of "
                             "kind 'replicate' (docs/cutover-day.md)")
        return self

    @model_validator(mode="after")
    def _tokens_usable(self) -> Settings:
        """Tenants apart (config/tenants.py), tokens a header can carry, admin tokens apart."""
        tenancy.check(self)
        api = set(tenancy.api_tokens(self).values())
        admin = {token for _, token in self.admin.named_tokens()}
        for where, tokens in (("gateway API", api), ("[admin]", admin)):
            if any(not _TOKEN_RE.fullmatch(token) for token in tokens):
                raise ValueError(f"a {where} token is empty or has a space or control "
                                 "character (a newline from a file?): no request can send it")
        if api & admin:
            raise ValueError("an [admin] token is also a [gateway] API token: every app "
                             "holding it could change routes; give the admin API its own")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            _SectionsFromEnv(settings_cls, env_settings),
            TomlConfigSettingsSource(settings_cls, toml_file=_TOML_FILE.get()),
        )


_TOML_FILE: ContextVar[Path | None] = ContextVar("toml_file", default=None)
"""The file :func:`load_settings` is reading (a subclass of ``Settings`` naming it, made
at each call, built the whole configuration's model a second time at every start:
docs/benchmarks.md, "Start-up: the last 10 %")."""


class _SectionsFromEnv(PydanticBaseSettingsSource):
    """The ``CUTOVER_*`` environment, minus whole-section variables that are not JSON
    objects or arrays: ``CUTOVER_WEBHOOKS=1`` is a flag of the acceptance suite (and of
    other tools), not a ``[webhooks]`` table, and must not stop the gateway."""

    def __init__(self, settings_cls: type[BaseSettings], env: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._env.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._env().items() if isinstance(v, dict | list)}


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file at ``path`` (if any), apply ``CUTOVER_*`` overrides, validate.

    Raises
    ------
    ConfigurationError
        When the file is missing or unreadable, or a value is invalid; the message names
        the offending key.
    """
    if path is not None and path.is_dir():
        raise ConfigurationError(f"configuration file {path} is a directory, not a TOML file")
    if path is not None and not path.is_file():
        raise ConfigurationError(f"configuration file {path} does not exist")

    where = path or "the environment"
    reading = _TOML_FILE.set(path)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = "\n".join(f"  {problems.key(e)}: {problems.message(e)}{_did_you_mean(e)}"
                          for e in exc.errors(include_url=False))
        raise ConfigurationError(f"invalid configuration in {where}:\n{lines}") from exc
    except SettingsError as exc:  # an environment value that does not parse
        raise ConfigurationError(
            f"invalid configuration: {exc} (check the CUTOVER_* environment variables; "
            "lists and tables are JSON, e.g. CUTOVER_GATEWAY__API_TOKENS='[\"r8_...\"]')"
        ) from exc
    except ValueError as exc:  # TOML syntax
        raise ConfigurationError(f"invalid configuration in {where}: {exc}") from exc
    finally:
        _TOML_FILE.reset(reading)


def _did_you_mean(error: Any) -> str:
    """`` (did you mean 'routes'?)`` after an unknown key close to a known one."""
    loc = [part for part in error["loc"] if isinstance(part, str)]  # no list indexes
    if error["type"] != "extra_forbidden" or not loc or len(loc) > 2 + (loc[0] == "providers"):
        return ""
    sections: dict[str, type[_Section | RouteSettings]] = {"providers": ProviderSettings}
    section = sections.get(loc[0]) or (RouteSettings if loc[0] == "routes" else None)
    model = Settings if len(loc) == 1 else section or Settings.model_fields[loc[0]].annotation
    import difflib  # for a configuration error only, not at every start

    close = difflib.get_close_matches(loc[-1], list(getattr(model, "model_fields", ())), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
