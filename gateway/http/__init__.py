"""The HTTP edge: the only importer of ``aiohttp.web`` besides the app factory.

``api`` (the Replicate API), ``admin`` (the admin API), ``ops`` (health, readiness,
metrics, assets, provider webhooks), ``middleware`` (auth, problem+json, body parsing),
``keys`` (typed app keys), ``wire`` (the prediction as apps see it).
"""
