"""What a database error means to its caller: try again, or the store refuses the value.

The per-item boundary (:mod:`gateway.boundary`) asks these two questions; nothing outside
the store package looks inside a SQLAlchemy exception (docs/lifecycle.md, "Errors").

* **transient**: the statement may pass if the item is tried again later: a lock or busy
  database (SQLite ``database is locked``), a serialization failure or deadlock
  (SQLSTATE 40001, 40P01), a lock timeout (55P03), a dropped or refused connection (class
  08, 57P01-57P03, an invalidated connection), the pool timing out, too many connections;
* **refused**: the store will never take this value, however often it is asked: a data
  exception (SQLSTATE class 22: too long, out of range, a character the encoding lacks),
  an integrity violation (class 23), a parameter that cannot be bound, or a webhook
  payload the outbound JSON cannot carry (:class:`ValueRefused`).

Anything else is neither: the boundary treats it as a bug that may pass (retried within
an attempt limit), never as a refusal.
"""

from __future__ import annotations

import sqlalchemy.exc as sa_exc

from gateway.store.engine import db

__all__ = ["ValueRefused", "refused", "transient"]

_TRANSIENT_STATES = {"40001", "40P01", "55P03"}
_TRANSIENT_SQLITE = ("locked", "busy", "disk i/o error", "unable to open")


class ValueRefused(Exception):
    """The store refuses a value (or the outbound JSON it writes cannot carry it).

    ``error`` names the store's error class, ``cause`` the database driver's (or the
    reason the JSON cannot carry the value).
    """

    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error} ({cause})")
        self.error = error
        self.cause = cause


def _text(value: str | None) -> str | None:
    """Provider text made storable everywhere: PostgreSQL text cannot hold NUL."""
    return None if value is None else value.replace("\x00", "\ufffd")


def _sqlstate(exc: sa_exc.DBAPIError) -> str:
    orig = exc.orig
    return str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a database failure that may pass on a later try: the database
    cannot be reached (:func:`gateway.store.engine.db.unreachable`), or it is locked, busy,
    deadlocked or could not serialise the transaction."""
    if db.unreachable(exc):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    state = _sqlstate(exc)
    if state in _TRANSIENT_STATES:
        return True
    if isinstance(exc, sa_exc.OperationalError):
        text = str(exc.orig).lower()
        return not state or any(word in text for word in _TRANSIENT_SQLITE)
    return False


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` says the store will never accept the value it was given."""
    if isinstance(exc, ValueRefused):
        return True
    if isinstance(exc, sa_exc.DataError | sa_exc.IntegrityError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        return _sqlstate(exc)[:2] in {"22", "23"}
    # A parameter SQLAlchemy could not bind (no DBAPI call was made).
    return isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError)
