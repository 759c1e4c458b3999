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


def test_aiohttps_tracebacks_for_what_a_client_sent_are_not_logged_as_errors() -> None:
    """After the 400, aiohttp read the rest of the body, met the same error and logged
    "Unhandled exception" with its traceback at ERROR; a malformed HTTP request was an
    ERROR traceback too: one per bad request anyone sends."""
    import logging

    from aiohttp import web

    from gateway import logs

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                                 "Unhandled exception", None, (type(exc), exc, None))

    assert not logs.client_errors(record(web.RequestPayloadError("400, message")))
    assert logs.client_errors(record(RuntimeError("a real one")))

    root, server = logging.getLogger(), logging.getLogger("aiohttp.server")
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure()  # INFO
        assert logs.client_errors in server.filters
        # a header over 8190 bytes: aiohttp answers 400 itself; one INFO line, no bytes of it
        from aiohttp.http_exceptions import LineTooLong

        long = record(LineTooLong(b"Authorization: Bearer r8_secret...", "8190"))
        assert logs.client_errors(long)
        assert (long.levelname, long.getMessage(), long.error, long.exc_info) == (
            "INFO", "http_request_malformed", "LineTooLong", None)
        logs.configure("WARNING")
        assert not logs.client_errors(record(LineTooLong(b"x", "8190")))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        server.removeFilter(logs.client_errors)
