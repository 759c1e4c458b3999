"""Shadow: compare a candidate provider's predictions with the control's (docs/shadow.md).

Public modules, in the order data flows through them:

- :mod:`shadow.policy` - ``ShadowPolicy``: which inputs of a route may be shadowed;
- :mod:`shadow.outcome` - what is compared: ``Outcome`` (one terminal prediction) and
  ``OutputFile``;
- :mod:`shadow.compare` - ``compare(control, candidate) -> PairComparison``;
- :mod:`shadow.thresholds` - ``Thresholds``, a route's margins and promotion limits;
- :mod:`shadow.noise` - ``Baseline`` from control-vs-control pairs, ``judge``, Wilson
  rates, ``contract_breach`` for the canary guard;
- :mod:`shadow.report` - ``build(route, pairs, baseline) -> Report`` and
  ``render(report, fmt)`` (md, json, html).

Imports only ``contracts`` (and third-party measures); never the gateway.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["compare", "noise", "outcome", "policy", "report", "thresholds"]


def __getattr__(name: str) -> ModuleType:
    """``shadow.compare`` and the other public modules, imported on first use (PEP 562).

    No submodule is imported with the package: the gateway reads route settings
    (``policy``, ``thresholds``) at start-up and needs the comparison modules only when it
    compares (docs/benchmarks.md). Raises AttributeError for any other name.
    """
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
