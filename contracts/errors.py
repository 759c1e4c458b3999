"""One error tree, organised by what the caller should do.

Every error the gateway raises on purpose derives from :class:`CutoverError`. The HTTP
layer maps each class to a problem+json response (RFC 9457) with its ``status`` and
``title``; adapters translate provider and transport failures into these classes at their
boundary (``raise ... from exc``), so nothing above them sees httpx or provider JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contracts.snapshot import ProviderSnapshot

__all__ = [
    "CapabilityMissing",
    "ConfigurationError",
    "Conflict",
    "ContractViolation",
    "CutoverError",
    "Forbidden",
    "NotFound",
    "OutcomeUnreadable",
    "PayloadTooLarge",
    "ProviderBusy",
    "ServiceUnavailable",
    "Unauthenticated",
    "UpstreamRejected",
    "UpstreamRetryable",
    "UpstreamUnreachable",
    "WebhookVerificationError",
]


class CutoverError(Exception):
    """Base of every deliberate gateway error.

    Attributes
    ----------
    status : int
        The HTTP status the API answers with when this error reaches a client.
    title : str
        A short, stable summary (problem+json ``title``).
    detail : str
        What went wrong and, where possible, how to fix it.
    """

    status = 500
    title = "Internal error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# --- the caller sent something wrong: do not retry as is -----------------------------


class ContractViolation(CutoverError):
    """The request does not follow the Replicate API contract (422)."""

    status = 422
    title = "Invalid request"


class NotFound(CutoverError):
    """The prediction, model, version or route does not exist (404)."""

    status = 404
    title = "Not found"


class Conflict(CutoverError):
    """The request conflicts with stored state, e.g. a reused idempotency key (409)."""

    status = 409
    title = "Conflict"


class PayloadTooLarge(CutoverError):
    """The request body exceeds the configured maximum (413)."""

    status = 413
    title = "Payload too large"


class Unauthenticated(CutoverError):
    """No valid API token was presented (401)."""

    status = 401
    title = "Unauthenticated"


class Forbidden(CutoverError):
    """The token is valid but not allowed to do this (403)."""

    status = 403
    title = "Forbidden"


class WebhookVerificationError(CutoverError):
    """A provider webhook failed verification; its body was not parsed (401)."""

    status = 401
    title = "Webhook verification failed"


# --- the upstream provider failed ------------------------------------------------------


class UpstreamRetryable(CutoverError):
    """The provider failed in a way that may pass on retry (5xx, timeout, connection).

    Attributes
    ----------
    retry_after_s : float or None
        The provider's own hint (``Retry-After``), in seconds, when it gave one.
    """

    status = 502
    title = "Upstream unavailable"

    def __init__(self, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class UpstreamUnreachable(UpstreamRetryable):
    """No connection to the provider could be made (refused, or the connect timed out):
    nothing of the request reached it, so a submit that fails so started nothing there.
    """


class OutcomeUnreadable(UpstreamRetryable):
    """The provider finished the job but its outcome cannot be read now (fal's result
    read answered 429, 5xx or 404, or did not connect, after ``COMPLETED``).

    The reader re-reads with backoff (honouring ``retry_after_s``) until ``window_s``
    has passed since the first such failure, then records ``final`` (docs/providers.md,
    "fal").

    Attributes
    ----------
    final : ProviderSnapshot
        The terminal snapshot to record once the window has passed.
    window_s : float
        How long after the first failed read the outcome may still be read, in seconds.
    """

    def __init__(
        self, detail: str, *, final: ProviderSnapshot, window_s: float,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(detail, retry_after_s=retry_after_s)
        self.final = final
        self.window_s = window_s


class ProviderBusy(UpstreamRetryable):
    """The provider did not start the work and asks to be tried later (Cog 409/503, 429).

    Attributes
    ----------
    retry_after_s : float or None
        The provider's own hint, when it gave one.
    """

    status = 503
    title = "Provider busy"


class UpstreamRejected(CutoverError):
    """The provider refused the work for good (e.g. 422 input validation)."""

    status = 422
    title = "Rejected by provider"


class CapabilityMissing(CutoverError):
    """The provider cannot do what was asked (no status endpoint, no cancel, ...)."""

    status = 501
    title = "Not supported by provider"


class ServiceUnavailable(CutoverError):
    """The gateway cannot do this right now (its store is down...); retry later (503)."""

    status = 503
    title = "Service unavailable"


# --- the operator must act ----------------------------------------------------------------


class ConfigurationError(CutoverError):
    """The configuration is invalid or incomplete."""

    status = 500
    title = "Configuration error"
