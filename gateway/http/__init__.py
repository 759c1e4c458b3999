"""The HTTP edge: the only importer of ``aiohttp.web`` besides the app factory.

``api`` (the Replicate API), ``admin`` (the admin API), ``provider_webhooks`` (their
intake), ``assets`` (owned output files), ``ops`` (health, readiness, metrics),
``middleware`` (auth, problem+json, body parsing), ``keys`` (typed app keys), ``wire``
(the prediction as apps see it). Handlers parse, call a service, serialise: no SQL.
"""
