"""Outbound webhook bodies and their Standard Webhooks signatures.

The gateway signs every webhook it sends to a legacy app the way Replicate does
(docs/replicate-api.md §6.4): ``webhook-signature`` carries ``v1,<base64 HMAC-SHA256>`` of
``"{webhook-id}.{webhook-timestamp}.{body}"``, keyed with the base64-decoded part of a
``whsec_`` secret.

Two client quirks (§6.5) shape this module:

* the Python client splits the secret on ``_`` and wants exactly two parts, so the base64
  part of a secret never contains ``_`` (standard alphabet, not URL-safe);
* the JS client may re-serialise an already parsed body with ``JSON.stringify`` before it
  checks the signature, so the bytes we sign and send are exactly what
  ``JSON.stringify(JSON.parse(body))`` produces (:func:`compact_json`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import orjson
import standardwebhooks

from contracts import errors

__all__ = ["SECRET_PREFIX", "Signer", "check_secret", "compact_json", "generate_secret"]

SECRET_PREFIX = "whsec_"  # noqa: S105 - the scheme's prefix, not a secret
_SECRET_BYTES = 32
_MAX_SAFE_INT = 2**53
_MAX_ARRAY_INDEX = 2**32 - 2
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_MSG_ID = re.compile(r"[\s\x00-\x1f\x7f]")


def generate_secret() -> str:
    """Make a new webhook signing secret.

    Returns
    -------
    str
        ``whsec_`` followed by the standard base64 (``+/``, padded) of 32 random bytes:
        50 characters. The base64 part never contains ``_`` (§6.5, Python client).
    """
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode("ascii")


# --- the body ------------------------------------------------------------------------------


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


# --- the signature ---------------------------------------------------------------------


class Signer:
    """Signs outbound webhooks, with an optional rotation overlap.

    Parameters
    ----------
    secret : str
        The current ``whsec_<base64>`` secret.
    previous_secret : str, optional
        The secret being rotated out; its signature is added while the overlap lasts.
    previous_valid_until : datetime, optional
        Timezone-aware end of the overlap; required with ``previous_secret``.

    Raises
    ------
    contracts.errors.ConfigurationError
        A secret that is not ``whsec_`` + standard base64 of a non-empty key, a base64
        part containing ``_`` (the Python client would refuse it, §6.5), or an
        overlap given without an aware deadline.

    Notes
    -----
    The HMAC is computed by ``standardwebhooks.Webhook.sign``, the reference library of
    the scheme. Its API takes the body as ``str`` and the timestamp as ``datetime``, so
    the body is decoded from UTF-8 and re-encoded there; :func:`compact_json` output is
    always valid UTF-8.
    """

    def __init__(
        self,
        secret: str,
        *,
        previous_secret: str | None = None,
        previous_valid_until: datetime | None = None,
    ) -> None:
        self._current = standardwebhooks.Webhook(_checked_secret(secret))
        self._previous: standardwebhooks.Webhook | None = None
        self._previous_valid_until = previous_valid_until
        if previous_secret is None:
            if previous_valid_until is not None:
                raise errors.ConfigurationError("previous_valid_until given without a secret")
            return
        if previous_valid_until is None or previous_valid_until.tzinfo is None:
            raise errors.ConfigurationError(
                "a previous webhook secret needs a timezone-aware previous_valid_until"
            )
        self._previous = standardwebhooks.Webhook(_checked_secret(previous_secret))

    def __repr__(self) -> str:
        return f"Signer(previous_valid_until={self._previous_valid_until!r})"

    def sign(self, msg_id: str, timestamp_s: int, body: bytes, *, now: datetime) -> str:
        """Compute the ``webhook-signature`` header value (§6.4).

        Parameters
        ----------
        msg_id : str
            The ``webhook-id``: the same on every retry of one message.
        timestamp_s : int
            The ``webhook-timestamp``: Unix seconds of this attempt.
        body : bytes
            The exact UTF-8 body sent (:func:`compact_json` output).
        now : datetime
            Timezone-aware current time; decides whether the rotation overlap is open.

        Returns
        -------
        str
            ``v1,<base64>`` for the current secret, followed by `` v1,<base64>`` for the
            previous secret while ``now < previous_valid_until``.

        Raises
        ------
        ValueError
            An empty ``msg_id`` or one with whitespace or control characters, a naive
            ``now``, or a body that is not UTF-8.
        TypeError
            ``timestamp_s`` is not an ``int`` (a float would be floored in the signature
            but not in the header).
        """
        if not msg_id or _BAD_MSG_ID.search(msg_id):
            raise ValueError("webhook id must be non-empty, without whitespace or controls")
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        if isinstance(timestamp_s, bool) or not isinstance(timestamp_s, int):
            raise TypeError("timestamp_s must be whole Unix seconds (int)")
        when = datetime.fromtimestamp(timestamp_s, tz=UTC)
        text = body.decode("utf-8")
        signatures = [self._current.sign(msg_id, when, text)]
        if self._previous is not None and self._previous_valid_until is not None:
            if now < self._previous_valid_until:
                signatures.append(self._previous.sign(msg_id, when, text))
        return " ".join(signatures)

    def headers(
        self, msg_id: str, timestamp_s: int, body: bytes, *, now: datetime
    ) -> dict[str, str]:
        """Build the three Standard Webhooks headers of one delivery attempt (§6.4).

        Parameters and errors are those of :meth:`sign`.

        Returns
        -------
        dict[str, str]
            ``webhook-id``, ``webhook-timestamp`` (decimal seconds) and
            ``webhook-signature``, with lowercase names (the JS client reads plain-object
            headers by lowercase key only, §6.5).
        """
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp_s),
            "webhook-signature": self.sign(msg_id, timestamp_s, body, now=now),
        }


def check_secret(secret: str) -> None:
    """Raise ``ConfigurationError`` (never naming the secret) for a secret the signer
    refuses: the configuration checks ``[webhooks] signing_secret`` with it at load."""
    _checked_secret(secret)


def _checked_secret(secret: str) -> bytes:
    """Decode a ``whsec_`` secret strictly; never put the secret in the error."""
    if not secret.startswith(SECRET_PREFIX):
        raise errors.ConfigurationError("webhook secret must start with 'whsec_'")
    encoded = secret[len(SECRET_PREFIX) :]
    if "_" in encoded:
        raise errors.ConfigurationError(
            "webhook secret must use standard base64 with no '_' (the Python client "
            "splits the secret on '_')"
        )
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise errors.ConfigurationError("webhook secret is not valid base64") from None
    if not key:
        raise errors.ConfigurationError("webhook secret key is empty")
    return key
