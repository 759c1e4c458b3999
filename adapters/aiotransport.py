"""An httpx transport that sends through aiohttp's client: httpx's API, aiohttp's cost.

The Cog adapter sends one ``PUT`` per prediction on the gateway's hottest path; through
httpx's own transport (httpcore, anyio, h11) that request cost about five times the CPU
of the same request through ``aiohttp.ClientSession``, a dependency the gateway already
has for its server (docs/benchmarks.md, "A run() with its job writes on sqlite3 and its
PUT through aiohttp"). :class:`AiohttpTransport` keeps the adapter's code on httpx
(requests, responses, ``httpx.MockTransport`` in tests, the exceptions it translates once:
docs/architecture.md, rule 5) and replaces only the transport underneath:

* the request goes as httpx built it (method, URL, headers, body), through one pooled
  ``ClientSession`` opened on first use (a constructor does no I/O) with the TLS context
  given (:func:`adapters.tls.client_context`), redirects not followed (httpx's default);
* the answer's body is read whole, still encoded, and handed to httpx as a stream, so
  httpx decodes it as it would its own;
* httpx's timeouts (``request.extensions["timeout"]``) become aiohttp's: ``connect`` for
  the connection, ``read`` between two reads of the answer;
* aiohttp's exceptions become the httpx exceptions its own transport raises for the same
  failure, with the original as the cause: a connection not made (``ConnectError``; a
  certificate that does not verify says ``CERTIFICATE_VERIFY_FAILED``), a connect timeout
  (``ConnectTimeout``), a read timeout (``ReadTimeout``), anything after the connection
  (``ReadError``).

:func:`send` goes one step further for the one request of the hot path (the Cog adapter's
``PUT``): a request already encoded (method, absolute URL, body bytes, headers) sent
without httpx's client layer (no ``httpx.Request``, URL merging, auth and redirect
handling: about 0.2 ms of CPU a request, docs/benchmarks.md, "The claim on sqlite3, the
PUT without httpx's client"); the answer is the same ``httpx.Response``, the failures the
same httpx exceptions. Through another transport (``httpx.MockTransport`` in tests) it
builds the ``httpx.Request`` and hands it to that transport.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp
import httpx

__all__ = ["AiohttpTransport", "json_body", "send"]


def json_body(value: Any) -> bytes:
    """``value`` as httpx's ``json=`` encodes a request body (compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


async def send(
    transport: httpx.AsyncBaseTransport, method: str, url: str, *, content: bytes,
    headers: Sequence[tuple[str, str]], limits: httpx.Timeout,
) -> httpx.Response:
    """One request through ``transport`` without an ``httpx.AsyncClient`` (module
    docstring): ``url`` absolute, ``headers`` all of them but ``Host`` and
    ``Content-Length``; ``limits`` the client's timeouts. Returns the answer with its
    body read.

    Raises
    ------
    httpx.HTTPError
        The exception httpx's own transport raises for the same failure.
    """
    if isinstance(transport, AiohttpTransport):
        return await transport.exchange(method, url, content, headers, limits.as_dict())
    request = httpx.Request(method, url, content=content, headers=list(headers),
                            extensions={"timeout": limits.as_dict()})
    response = await transport.handle_async_request(request)
    await response.aread()
    return response


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Send httpx requests through one ``aiohttp.ClientSession`` (module docstring).

    Parameters
    ----------
    ssl_context : ssl.SSLContext
        The verified context for ``https://`` URLs (:func:`adapters.tls.client_context`).
    """

    def __init__(self, *, ssl_context: ssl.SSLContext) -> None:
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl_context),
                auto_decompress=False,  # httpx decodes the body, as from its own transport
                skip_auto_headers=("User-Agent", "Accept-Encoding"),  # httpx's are sent
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx keeps the client's cookies
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        body = await request.aread()
        return await self.exchange(request.method, str(request.url), body, headers,
                                   request.extensions.get("timeout", {}), request)

    async def exchange(
        self, method: str, url: str, body: bytes, headers: Sequence[tuple[str, str]],
        limits: dict[str, float | None], request: httpx.Request | None = None,
    ) -> httpx.Response:
        """Send one request (``limits`` as httpx's ``Timeout.as_dict()``); the answer,
        its body read whole but not decoded (module docstring). Without ``request`` (from
        :func:`send`) the body is decoded here and the answer has no request."""
        timeouts = aiohttp.ClientTimeout(
            total=None, sock_connect=limits.get("connect"), sock_read=limits.get("read"),
            connect=limits.get("pool"),
        )
        try:
            async with self._open().request(
                method, url, data=body or None, headers=list(headers),
                allow_redirects=False, timeout=timeouts,
            ) as answer:
                content = await answer.read()
        except aiohttp.ClientConnectorError as exc:  # the connection was not made
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except aiohttp.ClientError as exc:  # after the connection: a drop, a bad answer
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc
        response = httpx.Response(
            answer.status, headers=list(answer.raw_headers),
            stream=httpx.ByteStream(content), request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )
        if request is None:
            response.read()  # httpx's client reads it otherwise
        return response

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
