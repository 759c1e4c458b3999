"""A test certificate authority and a server certificate for 127.0.0.1 (trustme).

The Python client treats only ``https:`` output URLs as files (docs/replicate-api.md §8.4), and Cog
(rustls) rejects a self-signed CA used directly as a server certificate, so tests serve
the gateway with a leaf certificate signed by this CA and point ``SSL_CERT_FILE`` at it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

__all__ = ["ServerTLS", "make_tls"]


@dataclass(frozen=True)
class ServerTLS:
    """Paths of the CA certificate and of the server's certificate chain and key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_tls(directory: Path) -> ServerTLS:
    """Write a fresh CA and a 127.0.0.1 server certificate into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    tls = ServerTLS(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    ca.cert_pem.write_to_path(str(tls.ca_file))
    server.private_key_pem.write_to_path(str(tls.key_file))
    with tls.cert_file.open("wb") as handle:
        for blob in server.cert_chain_pems:
            handle.write(blob.bytes())
    return tls
