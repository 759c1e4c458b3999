"""The one verified client SSL context of a process (docs/providers.md, "TLS to providers").

An ``httpx.AsyncClient`` built without ``verify`` makes an SSL context of its own, and each
context parses the whole CA bundle (OpenSSL 3: about 265 M instructions, 50 ms): one per
provider at every start, even for an ``http://`` base URL (docs/benchmarks.md, "Start-up:
the last 10 %"). :func:`client_context` builds the context httpx would build, once, on
first use, and every provider client and output download passes it.

It is exactly httpx's ``verify=True`` (``httpx.create_ssl_context``): CERT_REQUIRED,
host names checked, certifi's bundle, or with ``trust_env`` the file or directory that
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` names. A client with TLS settings of its own (a
client certificate, another CA) must build its own context: the shared one is never
changed, except by httpcore setting its ALPN to ``http/1.1`` at each connection, the
same value for every client (none of the gateway's uses HTTP/2).
"""

from __future__ import annotations

import os
import ssl
import threading

__all__ = ["client_context"]

_built: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_lock = threading.Lock()  # downloads ask from their threads


def client_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The process's verified client context for these trust settings, built on first use.

    Parameters
    ----------
    trust_env : bool
        As the client's own ``trust_env``: whether ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``
        replaces certifi's bundle (read at each call, as httpx reads them per client).

    Returns
    -------
    ssl.SSLContext
        The same object for every call that resolves to the same CA file or directory.
    """
    cafile = capath = None
    if trust_env and os.environ.get("SSL_CERT_FILE"):
        cafile = os.environ["SSL_CERT_FILE"]
    elif trust_env and os.environ.get("SSL_CERT_DIR"):
        capath = os.environ["SSL_CERT_DIR"]
    else:
        import certifi

        cafile = certifi.where()
    with _lock:
        context = _built.get((cafile, capath))
        if context is None:
            context = ssl.create_default_context(cafile=cafile, capath=capath)
            _built[cafile, capath] = context
    return context
