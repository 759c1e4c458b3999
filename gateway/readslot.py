"""A request's place in the read lane, which its work gives back before it waits on the
network (gateway/http/readlane.py; docs/lifecycle.md, "A bound on concurrent reads").

The lane bounds the prediction GETs in their handlers at once so that polls cannot crowd
the job lifecycle off the event loop; a GET that then waits seconds on another server
(the adopter's lookup of an unknown id at the legacy provider, gateway/legacy/adoption.py)
would keep a slot the other polls queue for while it does nothing on the loop. The lane
keeps its release here, in a context variable of the request's task; :func:`give_back`
releases it early, once. Outside a lane (no bound, another route) it does nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

__all__ = ["give_back", "holding", "reset"]

_RELEASE: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "read_slot", default=None)


def holding(release: Callable[[], None]) -> contextvars.Token[Callable[[], None] | None]:
    """The current task holds a read-lane slot, given back by ``release`` (which must be
    idempotent: the lane calls it again when the handler ends). The token resets it."""
    return _RELEASE.set(release)


def reset(token: contextvars.Token[Callable[[], None] | None]) -> None:
    """Undo :func:`holding` (the lane, as its handler ends)."""
    _RELEASE.reset(token)


def give_back() -> None:
    """Give the current request's read-lane slot back now, before a wait on the network;
    nothing when it holds none or gave it back already. The request goes on unbounded."""
    release = _RELEASE.get()
    if release is not None:
        release()
