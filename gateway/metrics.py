"""Prometheus metrics of one gateway process, served at ``GET /metrics``.

Each app has its own registry (no module-level state), so several apps in one process
(tests) do not collide. Label values are bounded: route keys, provider names, states and
outcomes from fixed sets; never prediction ids.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The counters the gateway keeps; ``render()`` gives the exposition text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.predictions_created = Counter(
            "cutover_predictions_created",
            "Predictions stored, by route and provider.",
            ["route", "provider"],
            registry=self.registry,
        )
        self.predictions_finished = Counter(
            "cutover_predictions_finished",
            "Predictions that reached a terminal state, by provider and state.",
            ["provider", "state"],
            registry=self.registry,
        )
        self.prediction_errors = Counter(
            "cutover_prediction_errors",
            "Failed predictions by provider and error class (model_refused, provider_fault,"
            " gateway_credentials: the provider refused the gateway's token, an alert).",
            ["provider", "error_class"],
            registry=self.registry,
        )
        self.provider_execution_seconds = Counter(
            "cutover_provider_execution_seconds",
            "Execution time the providers reported for finished jobs, in seconds, by"
            " provider; also what they report after the prediction ended (a canceled job).",
            ["provider"],
            registry=self.registry,
        )
        self.provider_submits = Counter(
            "cutover_provider_submits",
            "Submit attempts to providers, by outcome (accepted, busy, unreachable, rejected).",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self.provider_webhooks = Counter(
            "cutover_provider_webhooks",
            "Provider webhooks received, by outcome (stored, duplicate, refused).",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self.webhook_deliveries = Counter(
            "cutover_webhook_deliveries",
            "Outbound webhook delivery attempts to apps, by event and outcome.",
            ["event", "outcome"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "cutover_rate_limited",
            "Requests refused with 429 by the per-token limits, by token name and kind.",
            ["token", "kind"],
            registry=self.registry,
        )
        self.prediction_seconds = Histogram(
            "cutover_prediction_duration_seconds",
            "From creation to terminal state, by provider.",
            ["provider"],
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800),
            registry=self.registry,
        )

        self._routes()

    def _routes(self) -> None:
        """Per route and arm (docs/canary.md, "Reading the numbers")."""
        arm = ["route", "arm", "provider"]
        self.route_predictions = Counter(
            "cutover_route_predictions",
            "Predictions finished in this process, by route, arm, provider and state.",
            [*arm, "state"],
            registry=self.registry,
        )
        self.route_seconds = Histogram(
            "cutover_route_prediction_duration_seconds",
            "From creation to terminal state, by route, arm and provider.",
            arm,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800),
            registry=self.registry,
        )
        self.route_window_predictions = Gauge(
            "cutover_route_window_predictions",
            "Predictions finished within the guard window (all processes), by route and arm.",
            arm,
            registry=self.registry,
        )
        self.route_error_ratio = Gauge(
            "cutover_route_error_ratio",
            "Failed share (0-1) of the predictions within the guard window, by route and arm.",
            arm,
            registry=self.registry,
        )
        self.route_latency_p95 = Gauge(
            "cutover_route_latency_p95_seconds",
            "p95 latency within the guard window, by route and arm.",
            arm,
            registry=self.registry,
        )
        self.route_canary_percent = Gauge(
            "cutover_route_canary_percent",
            "The route's canary percent (0-100) as this process serves it.",
            ["route"],
            registry=self.registry,
        )
        self.route_shadow_percent = Gauge(
            "cutover_route_shadow_percent",
            "The route's shadow percent (0-100) as this process serves it.",
            ["route"],
            registry=self.registry,
        )
        self.guard_rollbacks = Counter(
            "cutover_guard_rollbacks",
            "Canaries the guard set back to 0, by route.",
            ["route"],
            registry=self.registry,
        )
        self.guard_stuck = Gauge(
            "cutover_guard_stuck_predictions",
            "Candidate predictions not taken max_queue_s after their create, as the guard's"
            " last round counted them (all processes), by route.",
            ["route"],
            registry=self.registry,
        )
        self.shadows = Counter(
            "cutover_shadows",
            "Shadow jobs, by route and outcome (created, dropped, submitted).",
            ["route", "outcome"],
            registry=self.registry,
        )

        self.shadow_skips = Counter(
            "cutover_shadow_skips",
            "Eligible primaries that got no shadow, by route and reason (policy_size,"
            " policy_field, budget, queue_full, provider_refused; docs/shadow.md).",
            ["route", "reason"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
