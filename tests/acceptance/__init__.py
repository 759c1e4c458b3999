"""The acceptance tier: tests that start other processes (``cutover serve``, a real Cog
server, RunPod's dev server, the demo, Node for the JS client). Still part of
``make test``; run alone with ``pytest tests/acceptance``."""
