"""The verified client SSL contexts of a process, one per trust setting (docs/providers.md,
"TLS to providers").

An ``httpx.AsyncClient`` built without ``verify`` makes an SSL context of its own, and each
context parses the whole CA bundle (OpenSSL 3: about 265 M instructions, 50 ms): one per
provider at every start, even for an ``http://`` base URL (docs/benchmarks.md, "Start-up:
the last 10 %"). :func:`client_context` builds the context httpx would build, once, on
first use, and every provider client and output download passes it.

It is exactly httpx's ``verify=True`` (``httpx.create_ssl_context``): CERT_REQUIRED,
host names checked, certifi's bundle, or with ``trust_env`` the file or directory that
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` names; a provider's ``ca_file`` (a private CA) adds
its certificates to those. Each distinct combination is built once per process. A shared
context is never changed, except by httpcore setting its ALPN to ``http/1.1`` at each
connection, the same value for every client (none of the gateway's uses HTTP/2).

:func:`ca_file_problem` is what ``cutover check`` says of a ``ca_file`` that cannot be
used; :func:`verify_failure` finds a certificate that did not verify in an exception's
causes, so a TLS failure is reported as such, not as "cannot connect".
"""

from __future__ import annotations

import os
import ssl
import threading
from pathlib import Path

from contracts.errors import ConfigurationError

__all__ = ["ca_file_problem", "client_context", "verify_failure"]

_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"

_built: dict[tuple[str | None, str | None, str | None], ssl.SSLContext] = {}
_lock = threading.Lock()  # downloads ask from their threads


def client_context(
    *, trust_env: bool = True, ca_file: str | Path | None = None
) -> ssl.SSLContext:
    """The process's verified client context for these trust settings, built on first use.

    Parameters
    ----------
    trust_env : bool
        As the client's own ``trust_env``: whether ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``
        replaces certifi's bundle (read at each call, as httpx reads them per client).
    ca_file : str or Path or None
        A PEM file of CA certificates trusted as well (a provider's ``ca_file``: a
        private CA), on top of the bundle above.

    Returns
    -------
    ssl.SSLContext
        The same object for every call that resolves to the same CA file or directory.

    Raises
    ------
    ConfigurationError
        ``ca_file`` cannot be read, or holds no certificate (:func:`ca_file_problem`).
    """
    cafile = capath = None
    if trust_env and os.environ.get("SSL_CERT_FILE"):
        cafile = os.environ["SSL_CERT_FILE"]
    elif trust_env and os.environ.get("SSL_CERT_DIR"):
        capath = os.environ["SSL_CERT_DIR"]
    else:
        import certifi

        cafile = certifi.where()
    extra = os.path.abspath(ca_file) if ca_file is not None else None
    with _lock:
        context = _built.get((cafile, capath, extra))
        if context is None:
            context = ssl.create_default_context(cafile=cafile, capath=capath)
            if extra is not None:
                if (why := ca_file_problem(extra)) is not None:
                    raise ConfigurationError(f"ca_file = {ca_file}: {why}")
                context.load_verify_locations(cafile=extra)
            _built[cafile, capath, extra] = context
    return context


def ca_file_problem(ca_file: str | Path) -> str | None:
    """Why ``ca_file`` cannot add a provider's trust anchors (missing, unreadable, not a PEM
    certificate), in a few words; None when it loads."""
    try:
        data = Path(ca_file).read_bytes()
    except FileNotFoundError:
        return "the file does not exist"
    except IsADirectoryError:
        return "it is a directory, not a PEM file"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or type(exc).__name__})"
    if _PEM_CERTIFICATE not in data:
        return "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    try:
        ssl.create_default_context(cafile=str(ca_file))
    except ssl.SSLError as exc:
        return f"OpenSSL cannot load it ({exc.reason or exc})"
    return None


def verify_failure(exc: BaseException) -> str | None:
    """``certificate verify failed: <why>`` when ``exc`` (or one of its causes) is a
    server certificate that did not verify; None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {current.verify_message or current.reason}"
        if "CERTIFICATE_VERIFY_FAILED" in str(current):  # httpcore may keep only the text
            why = str(current).partition("certificate verify failed:")[2]
            return "certificate verify failed: " + (why.split("(_ssl")[0].strip() or "?")
        current = current.__cause__ or current.__context__
    return None
