"""cutover's gateway: the aiohttp service that speaks Replicate's prediction API in front of
other providers (README.md; docs/architecture.md has the layout).

The public surface, resolved on first use (PEP 562) so that importing one module of the
package (``gateway.clock``, or ``gateway.healthcheck`` for ``cutover health``) does not
import the app:

- :func:`create_app` (:mod:`gateway.app`): ``create_app(settings, ...) -> web.Application``;
- :class:`Settings` and :func:`load_settings` (:mod:`gateway.config`): the configuration,
  from a TOML file and ``CUTOVER_*`` variables;
- :func:`main` (:mod:`gateway.cli`): the ``cutover`` command line, ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Settings", "create_app", "load_settings", "main"]

_HOMES = {
    "Settings": "gateway.config",
    "create_app": "gateway.app",
    "load_settings": "gateway.config",
    "main": "gateway.cli",
}


def __getattr__(name: str) -> Any:
    """One of :data:`__all__`, imported from its module on first use; AttributeError for
    any other name."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
