"""Adapters: one module per upstream provider, each implementing :class:`port.Adapter`."""

from adapters import port

__all__ = ["port"]
