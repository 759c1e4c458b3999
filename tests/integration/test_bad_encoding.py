"""A body that cannot be decoded as its ``Content-Encoding`` says is a 400 problem.

Found by hand: ``curl -H 'Content-Encoding: gzip' --data-binary hi`` on ``POST
/v1/predictions`` was a 500 "the gateway failed" with aiohttp's ``ContentEncodingError``
logged as an ``unhandled_error`` traceback.
"""

from __future__ import annotations

from tests.integration.test_bad_input import post_raw, problem, rejected_create
from tests.support.gateway import GatewayHarness


async def test_a_create_whose_body_is_not_the_gzip_it_claims_is_400(gateway: GatewayHarness):
    await rejected_create(gateway, b'{"version": "acme/echo"}', 400,
                          mentions="content-encoding: gzip", **{"Content-Encoding": "gzip"})


async def test_an_admin_change_whose_body_is_not_the_deflate_it_claims_is_400(make_gateway):
    gateway = await make_gateway(admin={"tokens": ["admin-token"]})
    response = await post_raw(gateway, "/admin/routes/acme/echo/canary", b"not deflate",
                              **{"Content-Encoding": "deflate",
                                 "Authorization": "Bearer admin-token"})
    await problem(response, 400, mentions="could not be read")


def test_aiohttps_traceback_for_an_answered_body_error_is_not_logged() -> None:
    """After the 400, aiohttp read the rest of the body, met the same error and logged
    "Unhandled exception" with its traceback at ERROR: one per bad request anyone sends."""
    import logging

    from aiohttp import web

    from gateway import logs

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                                 "Unhandled exception", None, (type(exc), exc, None))

    assert not logs.answered_body_errors(record(web.RequestPayloadError("400, message")))
    assert logs.answered_body_errors(record(RuntimeError("a real one")))
    root, server = logging.getLogger(), logging.getLogger("aiohttp.server")
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure()
        assert logs.answered_body_errors in server.filters
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        server.removeFilter(logs.answered_body_errors)
