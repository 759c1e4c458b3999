"""The one parser of times that arrive as text (query strings, CLI flags, cursors,
provider answers): ISO 8601 / RFC 3339, read as timezone-aware UTC.

Python 3.11's :meth:`datetime.fromisoformat` reads ``Z``, offsets and more than six
fractional digits (Cog writes nanoseconds in ``setup.started_at``, docs/cog.md); what it
refuses, and what lies outside years 1-9999 once in UTC, is a
:class:`~contracts.errors.ContractViolation` naming the field. The API's list filters
need a zone (docs/replicate-api.md §2.5).
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.errors import ContractViolation

__all__ = ["parse_time"]


def parse_time(text: str, name: str = "time", *, naive_is_utc: bool = True) -> datetime:
    """``text`` (``2026-05-01T12:00:00Z``, ``2026-05-01``...) as a UTC ``datetime``.

    Parameters
    ----------
    text : str
        An ISO 8601 date or date-time; surrounding whitespace is ignored.
    name : str
        What the value is (a query parameter, a flag): error messages name it.
    naive_is_utc : bool
        A time without a zone is UTC when True (operators' flags); refused when False
        (the API's filters and cursors, which always carry one).

    Raises
    ------
    ContractViolation
        ``text`` is not ISO 8601, has no zone while ``naive_is_utc`` is False, or is out
        of range in UTC (``0001-01-01T00:00:00+01:00``).
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ContractViolation(
            f"{name} must be an ISO 8601 time such as 2026-05-01T12:00:00Z, got {text!r}"
        ) from None
    if when.tzinfo is None:
        if not naive_is_utc:
            raise ContractViolation(f"{name} {text!r} needs a time zone (e.g. Z)")
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        raise ContractViolation(f"{name} {text!r} is out of range (years 1 to 9999 UTC)") from None
