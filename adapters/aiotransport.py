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
"""

from __future__ import annotations

import ssl

import aiohttp
import httpx

__all__ = ["AiohttpTransport"]


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
        timeout = request.extensions.get("timeout", {})
        limits = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read"),
            connect=timeout.get("pool"),
        )
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        body = await request.aread()
        try:
            async with self._open().request(
                request.method, str(request.url), data=body or None, headers=headers,
                allow_redirects=False, timeout=limits,
            ) as answer:
                content = await answer.read()
                return httpx.Response(
                    answer.status,
                    headers=list(answer.raw_headers),
                    stream=httpx.ByteStream(content),
                    request=request,
                    extensions={"http_version": b"HTTP/1.1"},
                )
        except aiohttp.ClientConnectorError as exc:  # the connection was not made
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except aiohttp.ClientError as exc:  # after the connection: a drop, a bad answer
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
