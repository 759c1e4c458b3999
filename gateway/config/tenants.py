"""Tenants: several apps behind one gateway, each seeing only its own (docs/security.md).

``[[tenants]]`` entries (:class:`TenantSettings`) group API tokens into tenants; the tokens
of ``[gateway] api_tokens`` and ``named_api_tokens`` form the tenant ``default``. Every
prediction stores the tenant of the token that created it, and the API answers a token
only about its own tenant's predictions (another tenant's is a 404, as an unknown one).
:func:`check` is the load-time validation :class:`gateway.config.Settings` runs (so
``cutover check`` refuses the same files); :func:`token_tenants` and :func:`api_tokens`
give the names the middleware works with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from contracts.auth import DEFAULT_TENANT, TENANT_CHARS, TENANT_NAME_RE
from gateway.config.sections import checked_secret

__all__ = ["SECRET_ROW_PREFIX", "TenantSettings", "api_tokens", "check", "file_owners",
           "token_tenants"]

SECRET_ROW_PREFIX = "webhook_signing_secret:"  # noqa: S105 (a row name, not a secret)
"""The ``secrets`` row of a tenant's generated signing secret is this plus its name."""


class _Tokens(Protocol):  # what is read of [gateway]
    @property
    def api_tokens(self) -> Sequence[SecretStr]: ...
    @property
    def named_api_tokens(self) -> Mapping[str, SecretStr]: ...


class _Routed(Protocol):  # what is read of a [[routes]] entry
    @property
    def model(self) -> str: ...
    @property
    def tenants(self) -> Sequence[str] | None: ...


class Settings(Protocol):
    """What these functions read of :class:`gateway.config.Settings` (named structurally,
    so this module, which that one imports, imports nothing back)."""

    @property
    def gateway(self) -> _Tokens: ...
    @property
    def tenants(self) -> Sequence[TenantSettings]: ...
    @property
    def routes(self) -> Sequence[_Routed]: ...


class TenantSettings(BaseModel):
    """``[[tenants]]``: one app's API tokens, and optionally its own webhook secret.

    ``name`` (1-32 of ``a-z 0-9 _ -``, not ``default``) is stored with each of its
    predictions and shown to operators; ``api_tokens`` are checked as ``[gateway]
    api_tokens`` are (names ``<tenant>/token-N`` in logs, rate limits and fair dispatch).
    ``webhook_signing_secret`` (``whsec_...``) signs its webhooks and its stream URLs;
    unset, one is generated once and kept in the store. ``GET /v1/webhooks/default/secret``
    answers each tenant its own.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    api_tokens: list[SecretStr] = Field(min_length=1)
    webhook_signing_secret: SecretStr | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        """The name is stored in ``jobs.tenant`` (32 characters) and shown in listings."""
        if len(value) > TENANT_CHARS or not TENANT_NAME_RE.fullmatch(value):
            shown = repr(value[:TENANT_CHARS]) + ("..." if len(value) > TENANT_CHARS else "")
            raise ValueError(f"the tenant name {shown} must be 1 to {TENANT_CHARS} of a-z, "
                             "0-9, _ and -, starting with a letter or digit")
        if value == DEFAULT_TENANT:
            raise ValueError(f"{DEFAULT_TENANT!r} is the tenant of [gateway] api_tokens: "
                             "put its tokens there, or give this tenant another name")
        return value

    @field_validator("webhook_signing_secret")
    @classmethod
    def _whsec(cls, value: SecretStr | None) -> SecretStr | None:
        return checked_secret(value)

    def token_names(self) -> list[tuple[str, str]]:
        """``(name, token)`` of each of its tokens: ``<tenant>/token-N``."""
        return [(f"{self.name}/token-{i}", t.get_secret_value())
                for i, t in enumerate(self.api_tokens, start=1)]


def api_tokens(settings: Settings) -> dict[str, str]:
    """Name -> token of every API token: ``named_api_tokens`` as named, ``api_tokens`` as
    ``token-N``, a tenant's as ``<tenant>/token-N``."""
    gw = settings.gateway
    tokens = {f"token-{i}": t.get_secret_value() for i, t in enumerate(gw.api_tokens, 1)}
    tokens.update({n: t.get_secret_value() for n, t in gw.named_api_tokens.items()})
    for tenant in settings.tenants:
        tokens.update(tenant.token_names())
    return tokens


def token_tenants(settings: Settings) -> dict[str, str]:
    """Token name (as :func:`api_tokens` names it) -> its tenant's name."""
    names = dict.fromkeys(api_tokens(settings), DEFAULT_TENANT)
    for tenant in settings.tenants:
        names.update(dict.fromkeys((name for name, _ in tenant.token_names()), tenant.name))
    return names


def file_owners(settings: Settings, scope_of: Callable[[str], str]) -> dict[str, frozenset[str]]:
    """Tenant -> the ``scope_of`` of each of its tokens (who may own the files its
    predictions name: :meth:`gateway.files.service.FileService.check_owned`); empty without
    ``[[tenants]]``, where any token's file may be named, as before tenants."""
    if not settings.tenants:
        return {}
    names = token_tenants(settings)
    owners: dict[str, set[str]] = {}
    for name, token in api_tokens(settings).items():
        owners.setdefault(names[name], set()).add(scope_of(token))
    return {tenant: frozenset(scopes) for tenant, scopes in owners.items()}


def check(settings: Settings) -> None:
    """Refuse what would let one tenant act as another, or name a tenant nobody has.

    Raises
    ------
    ValueError
        Two tenants with one name; a token in two tenants; a
        ``named_api_tokens`` name a tenant's token also has; a route naming an unknown
        tenant.
    """
    names = [DEFAULT_TENANT, *(t.name for t in settings.tenants)]
    _refuse_repeats(names, "two [[tenants]] entries are named {!r}")
    gw = settings.gateway
    owner: dict[str, str] = {}
    default = [*gw.api_tokens, *gw.named_api_tokens.values()]
    for tenant, tokens in [(DEFAULT_TENANT, default),
                           *((t.name, t.api_tokens) for t in settings.tenants)]:
        for token in tokens:
            seen = owner.setdefault(token.get_secret_value(), tenant)
            if seen != tenant:
                raise ValueError(f"one API token is given to tenants {seen} and {tenant}: "
                                 "a token belongs to exactly one tenant")
    taken = {name for t in settings.tenants for name, _ in t.token_names()}
    clash = sorted(taken & set(gw.named_api_tokens))
    if clash:
        raise ValueError(f"the named_api_tokens name {clash[0]!r} is also a tenant token's "
                         "name: rename it")
    for route in settings.routes:
        unknown = sorted(set(route.tenants or ()) - set(names))
        if unknown:
            raise ValueError(f"route {route.model} names unknown tenant {unknown[0]!r} "
                             f"(tenants: {', '.join(names)})")


def _refuse_repeats(values: Iterable[Any], message: str) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(message.format(value))
        seen.add(value)
