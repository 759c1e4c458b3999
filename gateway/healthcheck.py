"""``cutover health``: is the gateway on this machine ready? (the container's health check)

The command loads the configuration exactly as ``cutover serve`` does (``--config FILE`` or
``$CUTOVER_CONFIG``, then every ``CUTOVER_*`` environment override; gateway.config), so
a container configured by its environment is probed where the gateway really listens and
with the scheme it really serves. It GETs ``/ready`` (store reachable, providers and
routes configured: README, "HTTP API") on ``[gateway] listen``, a wildcard host read as
loopback (``0.0.0.0`` -> ``127.0.0.1``, ``::`` -> ``::1``), and exits 0 when the answer is
200, 1 otherwise. Over HTTPS the server must present ``[gateway] tls_cert_file`` itself
(that file is the only trust anchor; the host name is not checked, since the probe
reaches the gateway by its loopback address and the certificate names the public one).

``--timeout`` is a deadline for the whole probe (connect, TLS handshake, request and
answer), not for each socket operation: a listener that answers a byte at a time would
otherwise keep a probe running far past it. The probe runs on a daemon thread, given up
when the deadline passes (README, "Container").

Exit status 1 also covers a configuration that does not load, or a bad argument (a
``--timeout`` must be a number of seconds over 0): Docker reserves 2 for its
own use, and a container whose gateway cannot start is not healthy. One line says why
(stdout when ready, stderr otherwise), which ``docker inspect`` keeps with the result.

This module imports the configuration only, not the gateway (half a second less CPU on
every probe): the console script runs it without importing :mod:`gateway.cli`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import ssl
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from contracts.errors import ConfigurationError
from gateway.config import GatewaySettings, load_settings

__all__ = ["main", "probe_context", "probe_url"]

#: Default seconds for the whole probe (Docker's HEALTHCHECK --timeout is 5 s in the image).
DEFAULT_TIMEOUT_S = 4.0

_LOOPBACK = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]", "[::]": "[::1]"}  # noqa: S104


def probe_url(gateway: GatewaySettings, path: str = "/ready") -> str:
    """The URL of ``path`` on the gateway's listener, e.g. ``https://127.0.0.1:8443/ready``
    for ``listen = "0.0.0.0:8443"`` with a certificate configured."""
    host = _LOOPBACK.get(gateway.host, gateway.host)
    if ":" in host and not host.startswith("["):  # an IPv6 literal
        host = f"[{host}]"
    scheme = "https" if gateway.tls_cert_file else "http"
    return f"{scheme}://{host}:{gateway.port}{path}"


def probe_context(gateway: GatewaySettings) -> ssl.SSLContext | None:
    """For HTTPS, a client context trusting only the configured certificate (chain): the
    listener must present it; None for plain HTTP.

    Raises
    ------
    ConfigurationError
        The certificate file cannot be read as PEM.
    """
    if gateway.tls_cert_file is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # loopback address; the certificate names the public host
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor
    try:
        context.load_verify_locations(cafile=str(gateway.tls_cert_file))
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(
            f"cannot read [gateway] tls_cert_file = {gateway.tls_cert_file}: {why}"
        ) from exc
    return context


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument exits 1 (its one-line message on stderr), not 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: {message}\n")


def _seconds(text: str) -> float:
    """A ``--timeout``: finite and over 0 (0 would make the socket non-blocking)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds over 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cutover health",
        description="GET /ready on the configured listener; exit 0 when ready, 1 otherwise",
    )
    parser.add_argument(
        "--config", type=Path, default=os.environ.get("CUTOVER_CONFIG") or None,
        help="TOML configuration file, as for serve (default: $CUTOVER_CONFIG)",
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"give up after this long (default {DEFAULT_TIMEOUT_S:g})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``cutover health [--config FILE] [--timeout S]``; returns the exit status (0 or 1)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        gateway = load_settings(args.config).gateway
        url, context = probe_url(gateway), probe_context(gateway)
    except ConfigurationError as exc:
        print(f"cutover health: {exc.detail}", file=sys.stderr)
        return 1
    try:
        status, detail = _within(args.timeout, _get, url, args.timeout, context)
    except (urllib.error.URLError, OSError) as exc:  # refused, timed out, TLS mismatch
        why = getattr(exc, "reason", exc)
        print(f"cutover health: cannot reach {url}: {why}", file=sys.stderr)
        return 1
    if detail is not None:  # 503 Not ready: its problem detail says why
        print(f"cutover health: {url} answered {status}: {detail}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"cutover health: {url} answered {status}", file=sys.stderr)
        return 1
    print(f"ready: {url}")
    return 0


def _get(url: str, timeout_s: float, context: ssl.SSLContext | None) -> tuple[int, str | None]:
    """GET ``url``: its status, and for an error status its detail."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as answer:  # noqa: S310 (http(s) only)
            return answer.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, _detail(exc)


def _within(timeout_s: float, function: Any, *args: Any) -> Any:
    """``function(*args)`` on a daemon thread, given up (``TimeoutError``) after
    ``timeout_s``; the process exits without waiting for it."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, function(*args)))
        except BaseException as exc:  # noqa: BLE001 (raised again by the caller's thread)
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="cutover-health-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _detail(error: urllib.error.HTTPError) -> str:
    """The ``detail`` of a problem+json answer, else its reason phrase."""
    try:
        return str(json.loads(error.read(4096)).get("detail") or error.reason)
    except (ValueError, AttributeError, OSError):
        return str(error.reason)
