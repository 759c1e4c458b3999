"""Routes: which provider serves a model, a version of it, or a deployment.

A route is configured per model (``owner/name``), optionally narrowed to one version id
or named as a deployment. Lookup order for ``POST /v1/predictions``:
``owner/name:version`` -> the route with that model and version, else the model's
version-less route; a bare version id -> the route holding that version;
``owner/name`` -> the model's version-less route (reported version ``"hidden"``,
docs/replicate-api.md §2.2), else its only route. The control provider serves unless
the canary draw sends the prediction to the candidate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from contracts.errors import NotFound
from contracts.replicate import CreatePrediction
from gateway.config import RouteSettings

__all__ = ["Routed", "Router"]


@dataclass(frozen=True)
class Routed:
    """Where a new prediction goes and how it is reported back."""

    route: RouteSettings
    model: str
    version: str
    deployment: str | None
    provider: str
    target: str | None = None

    @property
    def key(self) -> str:
        route = self.route
        return f"{route.model}:{route.version}" if route.version else route.model


class Router:
    """Resolves create requests against the configured routes."""

    def __init__(self, routes: list[RouteSettings]) -> None:
        self._routes = routes

    @property
    def routes(self) -> list[RouteSettings]:
        return list(self._routes)

    def resolve(self, request: CreatePrediction, job_id: str) -> Routed:
        """The route for ``request``; ``job_id`` seeds the canary draw.

        Raises
        ------
        NotFound
            No route serves the model, version or deployment (a 404 problem naming it).
        """
        route = self._find(request)
        version = request.version_id or route.version or "hidden"
        if request.version_id is None and request.model is not None:
            version = "hidden"
        provider = self._provider(route, job_id)
        return Routed(
            route=route,
            model=route.model,
            version=version,
            deployment=request.deployment,
            provider=provider,
            target=route.target if provider == route.provider else route.candidate_target,
        )

    def _find(self, request: CreatePrediction) -> RouteSettings:
        if request.deployment is not None:
            return self._deployment(request.deployment)
        if request.version_id is not None:
            return self._version(request.model, request.version_id)
        assert request.model is not None
        return self._model(request.model)

    def _deployment(self, name: str) -> RouteSettings:
        for route in self._routes:
            if route.deployment == name:
                return route
        for route in self._routes:
            if route.model == name and route.deployment is None:
                return route
        raise NotFound(f"no route serves deployment {name!r}")

    def _version(self, model: str | None, version_id: str) -> RouteSettings:
        for route in self._routes:
            if route.version == version_id and (model is None or route.model == model):
                return route
        if model is not None:
            for route in self._routes:
                if route.model == model and route.version is None:
                    return route
        where = f"model {model!r} " if model else ""
        raise NotFound(
            f"version {version_id!r} of {where}is not routed by this gateway"
            if model
            else f"version {version_id!r} is not routed by this gateway"
        )

    def _model(self, model: str) -> RouteSettings:
        candidates = [r for r in self._routes if r.model == model]
        for route in candidates:
            if route.version is None:
                return route
        if candidates:
            return candidates[0]
        raise NotFound(f"model {model!r} is not routed by this gateway")

    def model_routes(self, model: str) -> list[RouteSettings]:
        """Every route of ``model`` (for the models and versions endpoints)."""
        return [r for r in self._routes if r.model == model]

    def deployment_route(self, name: str) -> RouteSettings:
        """The route serving deployment ``name`` (``NotFound`` otherwise)."""
        return self._deployment(name)

    @staticmethod
    def _provider(route: RouteSettings, job_id: str) -> str:
        if not route.candidate or route.canary_percent <= 0:
            return route.provider
        draw = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big") % 10_000
        return route.candidate if draw < route.canary_percent * 100 else route.provider
