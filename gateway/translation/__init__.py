"""Translation of the model's contract between an app and a provider (docs/translation.md):
``maps`` (jq programs, compiled once, run exactly), ``translator`` (which of a route's maps
a job runs), ``conformance`` (the output checked against the route's ``Output`` schema)
and ``dryrun`` (``cutover routes translate``: what a provider would be sent, calling
nobody). Nothing is imported here, so the pure route model can import ``maps`` alone."""
