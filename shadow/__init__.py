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

# No submodule is imported here: the gateway reads route settings (``policy``,
# ``thresholds``) at start-up and needs the comparison modules only when it compares.
__all__ = ["compare", "noise", "outcome", "policy", "report", "thresholds"]
