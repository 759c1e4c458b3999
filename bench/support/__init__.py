"""Helpers of the benchmark scripts: reference servers, load generators, statistics.

Not a benchmark itself (``make bench`` runs only ``bench/*.py``); see docs/benchmarks.md.
"""
