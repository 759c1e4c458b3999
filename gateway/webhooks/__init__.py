"""Outbound webhooks: delivery, attempt policy, retry, signing, SSRF guard, dead letters."""
