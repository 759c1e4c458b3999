"""Routes: which provider serves a model, a version of it, or a deployment.

A route is configured per model (``owner/name``), optionally narrowed to one version id
or named as a deployment. Lookup order for ``POST /v1/predictions``:
``owner/name:version`` -> the route with that model and version, else the model's
version-less route; a bare version id -> the route holding that version;
``owner/name`` -> the model's version-less route (reported version ``"hidden"``,
docs/replicate-api.md §2.2), else its only route.

Which routes exist and how they are found comes from the config file; each route's live
spec (control, candidate, canary percent, caller key, shadow settings) comes from the
store and is swapped in by :mod:`gateway.rollout.sync` whenever it changes. The control
provider serves unless the sticky canary draw (:mod:`gateway.rollout.canary`) sends the caller
to the candidate; the job then belongs to that provider for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.errors import NotFound
from contracts.replicate import CreatePrediction
from gateway.rollout import canary
from gateway.rollout.spec import RouteSettings, RouteSpec, route_key

__all__ = ["Caller", "Routed", "Router", "target_of"]


@dataclass(frozen=True)
class Caller:
    """Who sends a create request: the presented API token and the request headers."""

    token: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Routed:
    """Where a new prediction goes and how it is reported back."""

    route: RouteSettings
    model: str
    version: str
    deployment: str | None
    provider: str
    target: str | None = None
    arm: str = "control"
    spec: RouteSpec | None = None

    @property
    def key(self) -> str:
        return route_key(self.route.model, self.route.version)


def target_of(route: RouteSettings, provider: str) -> str | None:
    """The provider's own name for the route's model: ``target`` belongs to the file's
    ``provider``, ``candidate_target`` to its ``candidate``, whichever arm each serves now
    (after a promote the candidate is the control, docs/canary.md "Promote")."""
    if provider == route.provider:
        return route.target
    return route.candidate_target if provider == route.candidate else None


class Router:
    """Resolves create requests against the configured routes."""

    def __init__(self, routes: list[RouteSettings]) -> None:
        self._routes = routes
        self._specs = {route_key(r.model, r.version): r.spec() for r in routes}
        self.version = -1  # the store's routes version these specs came from

    @property
    def routes(self) -> list[RouteSettings]:
        return list(self._routes)

    @property
    def keys(self) -> list[str]:
        """The configured routes' names (``model`` or ``model:version``)."""
        return list(self._specs)

    def spec(self, key: str) -> RouteSpec:
        """The live spec of route ``key``; ``NotFound`` for an unknown route."""
        try:
            return self._specs[key]
        except KeyError:
            raise NotFound(f"route {key!r} does not exist") from None

    def target(self, key: str, provider: str) -> str | None:
        """``provider``'s own name for route ``key``'s model (``target`` of the file's
        ``provider``, ``candidate_target`` of its ``candidate``; None otherwise)."""
        for route in self._routes:
            if route_key(route.model, route.version) == key:
                return target_of(route, provider)
        raise NotFound(f"route {key!r} does not exist")

    def update(self, version: int, specs: Mapping[str, RouteSpec]) -> list[str]:
        """Take the store's specs (of the configured routes) at ``version``; the changed
        route names come back."""
        changed = [k for k in self._specs if k in specs and specs[k] != self._specs[k]]
        self._specs = {k: specs.get(k, spec) for k, spec in self._specs.items()}
        self.version = version
        return changed

    def resolve(
        self, request: CreatePrediction, job_id: str, caller: Caller | None = None,
        tenant: str | None = None,
    ) -> Routed:
        """The route for ``request``, and the arm the caller's canary draw picks.

        ``tenant`` (None: any) sees only the routes open to it (a route's ``tenants``):
        the others do not exist for it (docs/security.md).

        Raises
        ------
        NotFound
            No route the tenant may use serves the model, version or deployment (a 404
            problem naming it).
        """
        route = self._find(request, self._open_to(tenant))
        version = request.version_id or route.version or "hidden"
        if request.version_id is None and request.model is not None:
            version = "hidden"
        key = route_key(route.model, route.version)
        spec = self._specs[key]
        arm = self._arm(key, spec, caller or Caller(), request.input)
        provider = spec.candidate if arm == "candidate" and spec.candidate else spec.provider
        return Routed(
            route=route,
            model=route.model,
            version=version,
            deployment=request.deployment,
            provider=provider,
            target=target_of(route, provider),
            arm=arm,
            spec=spec,
        )

    @staticmethod
    def _arm(key: str, spec: RouteSpec, caller: Caller, data: dict[str, Any]) -> str:
        if not spec.candidate or spec.canary_percent <= 0:
            return "control"
        who = canary.caller_identity(
            spec.caller_key, token=caller.token, headers=caller.headers, data=data
        )
        return canary.choose_arm(key, who, spec.canary_percent)

    def _open_to(self, tenant: str | None) -> list[RouteSettings]:
        """The routes ``tenant`` may use (all of them for None)."""
        if tenant is None:
            return self._routes
        return [r for r in self._routes if r.tenants is None or tenant in r.tenants]

    def _find(self, request: CreatePrediction, routes: list[RouteSettings]) -> RouteSettings:
        if request.deployment is not None:
            return _deployment(routes, request.deployment)
        if request.version_id is not None:
            return _version(routes, request.model, request.version_id)
        assert request.model is not None
        return _model(routes, request.model)

    def model_routes(self, model: str, tenant: str | None = None) -> list[RouteSettings]:
        """Every route of ``model`` ``tenant`` may use (for the models and versions
        endpoints; None: any)."""
        return [r for r in self._open_to(tenant) if r.model == model]

    def deployment_route(self, name: str, tenant: str | None = None) -> RouteSettings:
        """The route serving deployment ``name`` to ``tenant`` (``NotFound`` otherwise)."""
        return _deployment(self._open_to(tenant), name)


def _deployment(routes: list[RouteSettings], name: str) -> RouteSettings:
    for route in routes:
        if route.deployment == name:
            return route
    for route in routes:
        if route.model == name and route.deployment is None:
            return route
    raise NotFound(f"no route serves deployment {name!r}")


def _version(routes: list[RouteSettings], model: str | None, version_id: str) -> RouteSettings:
    for route in routes:
        if route.version == version_id and (model is None or route.model == model):
            return route
    if model is not None:
        for route in routes:
            if route.model == model and route.version is None:
                return route
    where = f"model {model!r} " if model else ""
    raise NotFound(
        f"version {version_id!r} of {where}is not routed by this gateway"
        if model
        else f"version {version_id!r} is not routed by this gateway"
    )


def _model(routes: list[RouteSettings], model: str) -> RouteSettings:
    candidates = [r for r in routes if r.model == model]
    for route in candidates:
        if route.version is None:
            return route
    if candidates:
        return candidates[0]
    raise NotFound(f"model {model!r} is not routed by this gateway")
