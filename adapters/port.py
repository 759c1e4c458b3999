"""The adapter port: the one shape every upstream provider is driven through.

An adapter translates between provider-neutral contracts and one provider's wire format.
It owns one ``httpx.AsyncClient`` (created in its constructor without I/O, closed by
``aclose``), one mapping table from the provider's raw statuses to
:class:`contracts.job.JobState`, and one place where httpx errors and provider error
bodies become :mod:`contracts.errors` (docs/architecture.md, rules 3 and 5). Adapters
never touch the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from contracts.snapshot import Capabilities, ProviderRef, ProviderSnapshot, SubmitRequest

__all__ = ["Adapter"]


@runtime_checkable
class Adapter(Protocol):
    """A provider behind the gateway.

    Errors (from :mod:`contracts.errors`) that any method may raise:
    ``ProviderBusy`` (not started, try later), ``UpstreamRetryable`` (transport or 5xx),
    ``UpstreamRejected`` (permanent refusal), ``CapabilityMissing`` (see
    :attr:`capabilities`).
    """

    name: str
    capabilities: Capabilities

    async def submit(self, request: SubmitRequest) -> ProviderSnapshot:
        """Start the job upstream; return the provider's first snapshot (its id included)."""
        ...

    async def fetch(self, ref: ProviderRef) -> ProviderSnapshot:
        """Ask the provider where the job stands (a poll, or Cog's watchdog probe)."""
        ...

    async def cancel(self, ref: ProviderRef) -> bool:
        """Ask the provider to cancel; True when it accepted the request.

        Acceptance is only a request: the terminal event decides the outcome.
        """
        ...

    async def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> None:
        """Check a provider webhook's authenticity from the raw bytes, before any parsing.

        Asynchronous because a key may have to be fetched first (fal's JWKS, Replicate's
        signing secret). Raises ``WebhookVerificationError`` when it does not verify.
        """
        ...

    def parse_webhook(self, body: bytes) -> ProviderSnapshot:
        """Parse a verified webhook body into a snapshot (``ContractViolation`` if malformed)."""
        ...

    async def aclose(self) -> None:
        """Release the adapter's HTTP client."""
        ...
