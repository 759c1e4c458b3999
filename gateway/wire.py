"""The job as apps see it: a Replicate prediction object (docs/replicate-api.md §4).

Every prediction the gateway sends, in a response or a webhook, is made here, so the
rules of §4.3 hold in one place: ``urls`` values are absolute gateway URLs (never
upstream ones), the status is one of five values, timestamps are RFC 3339 UTC with a
``Z`` and microseconds, and ``metrics.predict_time`` appears only in terminal states.
:func:`compact_json` gives the exact bytes of a webhook body (docs/webhooks.md).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import orjson

from contracts.job import Job, replicate_status
from contracts.replicate import Prediction
from gateway import stream

__all__ = [
    "body",
    "compact_json",
    "dumps",
    "prediction",
    "prediction_json",
    "prediction_url",
    "timestamp",
]

_MAX_SAFE_INT = 2**53
_MAX_ARRAY_INDEX = 2**32 - 2
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
_SURROGATE = re.compile("[\ud800-\udfff]")


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


# --- a webhook body's bytes ---------------------------------------------------------------


def compact_json(value: object) -> bytes:
    """Serialise a JSON value to the exact bytes sent as a webhook body.

    The output is byte-identical to JavaScript's ``JSON.stringify(JSON.parse(body))`` on
    itself (§6.5, JS client), which means:

    * compact (no whitespace), UTF-8, non-ASCII written as is, U+2028/U+2029 written raw;
    * control characters escaped as ``\\b \\f \\n \\r \\t`` or ``\\u00xx`` (lowercase hex);
      a lone surrogate is escaped as ``\\udxxx``; a high+low surrogate pair held as two
      code points is joined into the one character it encodes (two keys that become
      equal that way are merged as ``JSON.parse`` would: first position, last value);
    * numbers written the way JS prints a double: ``1.0`` -> ``1``, ``1e-07`` -> ``1e-7``,
      ``1e21`` -> ``1e+21``, ``-0.0`` -> ``0``; an ``int`` beyond 2**53 is written as the
      nearest double, as JS would read it (``2**60`` -> ``1152921504606847000``): a
      receiver sees the same rounded value whichever language it uses;
    * key order preserved, except that keys which are JS array indices (``"0"``,
      ``"17"``, up to ``"4294967294"``) come first in ascending numeric order, as JS
      object property order requires.

    Parameters
    ----------
    value : object
        ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``/``tuple`` or ``dict``
        with ``str`` keys, nested. Pydantic models must be dumped first
        (``model_dump(mode="json")``).

    Returns
    -------
    bytes
        UTF-8 JSON text.

    Raises
    ------
    ValueError
        A NaN or infinite float, an ``int`` too large for a double, a circular
        reference, or nesting deeper than the encoder's recursion allows (several
        hundred levels).
    TypeError
        Any other type, or a non-``str`` dict key.
    """
    if _orjson_writes_it_alike(value, 0):  # the usual prediction: orjson, in C
        return orjson.dumps(value)
    try:
        return "".join(_encode(value, set())).encode("utf-8")
    except RecursionError:  # the exact encoder recurses once per level
        raise ValueError("nested too deeply to encode (Python's recursion limit)") from None


_ORJSON_MAX_DEPTH = 200  # orjson refuses deeper nesting; cycles never get this far


def _orjson_writes_it_alike(value: object, depth: int) -> bool:
    """Whether ``orjson.dumps(value)`` is byte-identical to the :func:`_encode` output.

    orjson escapes strings exactly as ``JSON.stringify`` does except lone surrogates
    (which it refuses); it differs on integers beyond 2**53, on floats it prints
    otherwise (``1.0``, ``1e-7``), and on the order of array-index keys. Anything
    else (another type, a subclass, a deep or circular value) also takes the exact
    encoder, which raises what it must.
    """
    kind = type(value)
    if kind is str:
        return _SURROGATE.search(cast(str, value)) is None
    if kind is int:
        return -_MAX_SAFE_INT <= cast(int, value) <= _MAX_SAFE_INT
    if value is None or kind is bool:
        return True
    if kind is float:
        number = cast(float, value)
        return math.isfinite(number) and orjson.dumps(number).decode() == _js_float(number)
    if depth >= _ORJSON_MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in cast(dict[object, object], value).items():
            if type(key) is not str or _SURROGATE.search(key) is not None:
                return False
            if key[:1].isdigit() and _is_array_index(key):
                return False
            if not _orjson_writes_it_alike(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        items = cast(list[object], value)
        return all(_orjson_writes_it_alike(item, depth + 1) for item in items)
    return False


def _encode(value: object, path: set[int]) -> Iterator[str]:
    # bool before int: bool is an int subclass.
    if value is None or isinstance(value, bool):
        yield {None: "null", True: "true", False: "false"}[value]
    elif isinstance(value, str):
        yield _js_string(value)
    elif isinstance(value, int):
        yield _js_int(value)
    elif isinstance(value, float):
        yield _js_float(value)
    elif isinstance(value, dict | list | tuple):
        if id(value) in path:
            raise ValueError("circular reference in webhook body")
        path.add(id(value))
        if isinstance(value, dict):
            yield from _encode_object(value, path)
        else:
            yield from _encode_array(value, path)
        path.discard(id(value))
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _encode_array(items: list[object] | tuple[object, ...], path: set[int]) -> Iterator[str]:
    yield "["
    for i, item in enumerate(items):
        if i:
            yield ","
        yield from _encode(item, path)
    yield "]"


def _encode_object(obj: dict[object, object], path: set[int]) -> Iterator[str]:
    # Keys as JS sees them: two Python keys may be one JS key once surrogate pairs are
    # joined; JSON.parse then keeps the first position and the last value.
    members: dict[str, object] = {}
    for key, item in obj.items():
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be str, not {type(key).__name__}")
        members[_join_surrogate_pairs(key)] = item
    indices = sorted((k for k in members if _is_array_index(k)), key=int)
    ordered = indices + [k for k in members if not _is_array_index(k)]
    yield "{"
    for i, key in enumerate(ordered):
        if i:
            yield ","
        yield _js_string(key)
        yield ":"
        yield from _encode(members[key], path)
    yield "}"


def _is_array_index(key: str) -> bool:
    """True for keys JS orders first: canonical decimal integers 0 .. 2**32 - 2."""
    return _ARRAY_INDEX.fullmatch(key) is not None and int(key) <= _MAX_ARRAY_INDEX


def _join_surrogate_pairs(text: str) -> str:
    """Turn a high+low surrogate pair held as two code points into its one character."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _js_string(text: str) -> str:
    quoted = json.dumps(_join_surrogate_pairs(text), ensure_ascii=False)
    # json.dumps passes lone surrogates through raw; JSON.stringify escapes them.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _js_int(number: int) -> str:
    if -_MAX_SAFE_INT <= number <= _MAX_SAFE_INT:
        return str(number)
    try:
        as_double = float(number)
    except OverflowError:
        raise ValueError(f"integer with {number.bit_length()} bits is too large for JSON") from None
    return _js_float(as_double)


def _js_float(number: float) -> str:
    """Format a double like ECMAScript Number::toString (ECMA-262 §6.1.6.1.20)."""
    if not math.isfinite(number):
        raise ValueError(f"{number!r} is not valid JSON")
    if number == 0:
        return "0"
    digits, n = _shortest_digits(abs(number))
    k = len(digits)
    sign = "-" if number < 0 else ""
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{n - 1:+d}"


def _shortest_digits(number: float) -> tuple[str, int]:
    """Return ``(digits, n)`` with ``number == 0.<digits> * 10**n``, digits shortest.

    Python's ``repr`` already yields the shortest round-tripping digits, as JS does.
    """
    mantissa, _, exponent = repr(number).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    n = len(whole) + (int(exponent) if exponent else 0)
    significant = digits.lstrip("0")
    n -= len(digits) - len(significant)
    return significant.rstrip("0"), n
