"""Cog's wire format: its prediction JSON, its statuses, its error answers (docs/cog.md).

Only :mod:`adapters.cog` imports this module: provider JSON never leaves the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters import errortext
from adapters.transport import parse_retry_after
from contracts.errors import ContractViolation, ProviderBusy, UpstreamRejected, UpstreamRetryable
from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot
from contracts.times import parse_time

__all__ = [
    "PROBE_INPUT", "STATUS_MAP", "CogPrediction", "describe", "map_status", "model_error",
    "parse_timestamp", "prediction", "raise_for_status", "refuses_input",
]

#: Cog's raw status -> canonical state (§1.5, §6). Anything else: see :func:`map_status`.
STATUS_MAP: Mapping[str, JobState] = {
    "starting": JobState.QUEUED,
    "processing": JobState.RUNNING,
    "succeeded": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "canceled": JobState.CANCELED,
}

#: Sent by the watchdog probe instead of the job's input: ignored while the prediction
#: is in flight, refused before ``predict()`` once it is forgotten (see above).
PROBE_INPUT = "cutover-watchdog-probe"

_BUSY_CODES = frozenset({409, 429, 503})  # at capacity, too many streams, setup unfinished
_BODY_EXCERPT_CHARS = 200
#: What coglet 0.23.1 puts before a failed prediction's error, twice (§1.5).
_FAILED_PREFIX = "Prediction failed: "


def map_status(raw_status: str) -> JobState:
    """Canonical state of a Cog status (§1.5); an unknown one is ``RUNNING`` (non-terminal)."""
    return STATUS_MAP.get(raw_status, JobState.RUNNING)


class CogPrediction(BaseModel):
    """A prediction as Cog serialises it in responses and webhooks (§1.5)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1)
    status: str = Field(min_length=1)
    input: Any = None  # only in PUT answers about an in-flight prediction
    output: Any = None
    logs: str | None = None
    error: str | None = None
    metrics: dict[str, Any] | None = None

    def snapshot(self) -> ProviderSnapshot:
        return ProviderSnapshot(
            provider_job_id=self.id, state=map_status(self.status), raw_status=self.status,
            output=self.output, logs=self.logs, error=model_error(self.error),
            metrics=self.metrics or {},
        )

    @property
    def forgotten(self) -> bool:
        """This answer to the probe shows that Cog no longer knew the prediction."""
        created_now = self.status == "starting" and "input" not in self.model_fields_set
        return created_now or self.input == PROBE_INPUT


def model_error(error: str | None) -> str | None:
    """The model's own error text: Cog's ``Prediction failed: `` prefixes removed, however
    many (0.23.1 writes ``"Prediction failed: Prediction failed: ValueError: boom"`` for a
    ``predict()`` that raised ``ValueError("boom")``; this gives ``"ValueError: boom"``).
    An error that is nothing but the prefix stays as it is (docs/cog.md §1.5)."""
    if error is None:
        return None
    text = error
    while text.startswith(_FAILED_PREFIX) and text[len(_FAILED_PREFIX):].strip():
        text = text[len(_FAILED_PREFIX):]
    return errortext.one_line(text)


def parse_timestamp(value: object) -> datetime | None:
    """An RFC 3339 time as Cog writes it (nanoseconds, ``+00:00``) in UTC
    (:func:`contracts.times.parse_time`); None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value, "setup.started_at", naive_is_utc=False)
    except ContractViolation:
        return None


def raise_for_status(name: str, action: str, response: httpx.Response) -> None:
    """Map a Cog error status to the error tree (§1.4); 2xx passes."""
    code = response.status_code
    if code < 300:
        return
    what = f"{name}: {action} answered {code}"
    if code in _BUSY_CODES:
        raise ProviderBusy(
            f"{what} (not started, try later): {_excerpt(response)}",
            retry_after_s=parse_retry_after(response.headers.get("retry-after")),
        )
    if code == httpx.codes.UNPROCESSABLE_ENTITY:
        raise UpstreamRejected(f"{what}: {_validation_detail(response)}")
    if code < 500:  # other 4xx, and redirects (a misconfigured base_url)
        raise UpstreamRejected(f"{what}: {_excerpt(response)}")
    raise UpstreamRetryable(f"{what}: {_excerpt(response)}")


def prediction(name: str, response: httpx.Response) -> CogPrediction:
    try:
        return CogPrediction.model_validate_json(response.content)
    except ValidationError as exc:
        raise UpstreamRetryable(
            f"{name}: answered {response.status_code} with a body that is not a prediction: "
            f"{_excerpt(response)}"
        ) from exc


def _detail(response: httpx.Response) -> list[Any] | str | None:
    """The ``detail`` of Cog's 422 body (§1.3): a list of complaints, or None."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None
    return detail if isinstance(detail, list | str) and detail else None


def refuses_input(response: httpx.Response) -> bool:
    """Whether a 422 names the input itself (``loc: ["body", "input", ...]``)."""
    detail = _detail(response)
    return isinstance(detail, list) and any(
        isinstance(item, Mapping) and list(item.get("loc") or ())[:2] == ["body", "input"]
        for item in detail
    )


def _validation_detail(response: httpx.Response) -> str:
    """``input.prompt: Field required; ...`` from Cog's 422 body."""
    detail = _detail(response)
    if detail is None:
        return _excerpt(response)
    return detail if isinstance(detail, str) else "; ".join(describe(i) for i in detail)


def describe(item: Any) -> str:
    """One validation complaint (Cog's or pydantic's) as ``where: what``."""
    if not isinstance(item, Mapping):
        return str(item)
    loc = [str(part) for part in item.get("loc") or () if part != "body"]
    msg = str(item.get("msg", "invalid"))
    return f"{'.'.join(loc)}: {msg}" if loc else msg


def _excerpt(response: httpx.Response) -> str:
    text = response.text.strip()
    if len(text) > _BODY_EXCERPT_CHARS:
        text = text[:_BODY_EXCERPT_CHARS] + "..."
    return text or "(empty body)"
