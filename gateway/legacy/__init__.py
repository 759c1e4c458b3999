"""Cutover day (docs/cutover-day.md): ``adoption`` (a prediction the legacy provider
started, looked up by id, recorded and tracked like the gateway's own), ``history`` (the
legacy provider's finished predictions stored, idempotently) and ``importcli``
(``cutover import``). Nothing is imported here."""
