"""Proof under faults: the chaos run shipped with cutover (docs/reliability.md).

The package drives gateway processes from outside, as an app and a provider would, over
HTTP only: it never imports the gateway (an import-linter contract keeps it so).
``cutover chaos`` is its command line (:mod:`chaos.cli`).
"""

__all__: list[str] = []
