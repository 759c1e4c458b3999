"""The job as apps see it: a Replicate prediction object (docs/replicate-api.md §4).

Every prediction the gateway sends, in a response or a webhook, is made here, so the
rules of §4.3 hold in one place: ``urls`` values are absolute gateway URLs (never
upstream ones), the status is one of five values, timestamps are RFC 3339 UTC with a
``Z`` and microseconds, and ``metrics.predict_time`` appears only in terminal states.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson

from contracts.job import Job, replicate_status
from contracts.replicate import Prediction
from gateway import stream

__all__ = ["body", "dumps", "prediction", "prediction_json", "prediction_url", "timestamp"]


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``: orjson, or the standard library for what orjson
    cannot write (integers beyond 64 bits, which apps may send in an input)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def timestamp(value: datetime | None) -> str | None:
    """``2024-01-02T03:04:05.678901Z`` for an aware datetime, shown in UTC; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def prediction_url(base_url: str, job_id: str) -> str:
    """The absolute ``urls.get`` of a prediction on this gateway."""
    return f"{base_url}/v1/predictions/{job_id}"


def prediction(
    job: Job, base_url: str, *, status: str | None = None, stream_secret: str | None = None
) -> Prediction:
    """The prediction object for ``job``.

    Parameters
    ----------
    job : Job
        The stored job.
    base_url : str
        The gateway's public URL (no trailing slash), for ``urls``.
    status : str, optional
        Override the reported status; used for ``Prefer: wait`` answers that must say
        ``starting`` while unfinished (§3.2).
    stream_secret : str, optional
        The key of the capability token in ``urls.stream``. Every prediction has a stream
        (as on Replicate's streaming-capable models: the JS client's ``stream()`` does not
        send ``stream: true``, docs/replicate-api.md §3.1, §7); None leaves ``urls.stream`` out.
    """
    get_url = prediction_url(base_url, job.id)
    urls = {"get": get_url, "cancel": f"{get_url}/cancel", "web": get_url}
    if stream_secret is not None:
        token = stream.stream_token(stream_secret, job.id)
        urls["stream"] = f"{base_url}/streams/{job.id}?t={token}"
    job, shown = _as_shown(job, status)
    return Prediction(
        id=job.id,
        model=job.model,
        version=job.version,
        input=None if job.data_removed else job.input,
        output=None if job.data_removed else job.output,
        logs=job.logs or "",
        error=job.error,
        status=shown,
        created_at=timestamp(job.created_at) or "",
        started_at=timestamp(job.started_at),
        completed_at=timestamp(job.completed_at),
        urls=urls,
        metrics=_metrics(job),
        data_removed=job.data_removed,
        deadline=timestamp(job.deadline),
        deployment=job.deployment,
        webhook=job.webhook,
        webhook_events_filter=job.webhook_events_filter,
    )


def body(
    job: Job, base_url: str, *, status: str | None = None, stream_secret: str | None = None
) -> dict[str, Any]:
    """The JSON object of ``job`` as apps see it: ``prediction(...).wire()``, built directly.

    Optional keys without a value (``deadline``, ``deployment``, ``webhook``,
    ``webhook_events_filter``) are left out, as :meth:`Prediction.wire` does.
    """
    get_url = prediction_url(base_url, job.id)
    urls = {"get": get_url, "cancel": f"{get_url}/cancel", "web": get_url}
    if stream_secret is not None:
        token = stream.stream_token(stream_secret, job.id)
        urls["stream"] = f"{base_url}/streams/{job.id}?t={token}"
    job, shown = _as_shown(job, status)
    removed = job.data_removed
    data: dict[str, Any] = {
        "id": job.id,
        "model": job.model,
        "version": job.version,
        "input": None if removed else job.input,
        "output": None if removed else job.output,
        "logs": job.logs or "",
        "error": job.error,
        "status": shown,
        "created_at": timestamp(job.created_at) or "",
        "started_at": timestamp(job.started_at),
        "completed_at": timestamp(job.completed_at),
        "urls": urls,
        "metrics": _metrics(job),
        "data_removed": removed,
        "source": "api",
    }
    optional = {
        "deadline": timestamp(job.deadline),
        "deployment": job.deployment,
        "webhook": job.webhook,
        "webhook_events_filter": job.webhook_events_filter,
    }
    data.update((k, v) for k, v in optional.items() if v is not None)
    return data


def prediction_json(
    job: Job, base_url: str, *, status: str | None = None, stream_secret: str | None = None
) -> bytes:
    """:func:`body` as compact UTF-8 JSON bytes (orjson: the hot path of GET and list)."""
    return dumps(body(job, base_url, status=status, stream_secret=stream_secret))


def _as_shown(job: Job, status: str | None) -> tuple[Job, str]:
    """``job`` and the status it is shown with. A rewritten status is consistent as a
    whole: a ``starting`` answer carries no output, logs or start time, or the Python
    client's iterator would count those items as delivered and skip them later."""
    shown = replicate_status(job.state)
    if status is None or status == shown:
        return job, shown
    return job.model_copy(update={"output": None, "logs": None, "started_at": None}), status


def _metrics(job: Job) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    if job.metrics:
        metrics.update({k: v for k, v in job.metrics.items() if k != "predict_time"})
    if not job.state.terminal:
        return metrics
    if job.metrics and isinstance(job.metrics.get("predict_time"), int | float):
        metrics["predict_time"] = job.metrics["predict_time"]
    elif job.started_at and job.completed_at:
        metrics["predict_time"] = (job.completed_at - job.started_at).total_seconds()
    if job.completed_at:
        metrics["total_time"] = (job.completed_at - job.created_at).total_seconds()
    return metrics
