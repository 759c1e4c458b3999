"""The ``cutover`` command.

``cutover serve --config FILE``  run the gateway (HTTPS when a certificate is configured)
``cutover migrate --config FILE``  apply the store's migrations and exit
``cutover check --config FILE``  validate the configuration and print a summary
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from contracts.errors import ConfigurationError
from gateway import db, logs
from gateway.app import create_app
from gateway.config import Settings, load_settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cutover", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run the gateway"),
        ("migrate", "apply database migrations and exit"),
        ("check", "validate the configuration"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument(
            "--config",
            type=Path,
            default=os.environ.get("CUTOVER_CONFIG"),
            help="TOML configuration file (default: $CUTOVER_CONFIG)",
        )
        command.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cutover`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logs.configure(args.log_level)
    try:
        settings = load_settings(args.config)
        if args.command == "check":
            return _check(settings)
        if args.command == "migrate":
            asyncio.run(_migrate(settings))
            return 0
        return _serve(settings)
    except ConfigurationError as exc:
        print(f"cutover: {exc.detail}", file=sys.stderr)
        return 2


def _check(settings: Settings) -> int:
    gw = settings.gateway
    print(f"listen      {gw.listen} ({'https' if gw.tls_cert_file else 'http'})")
    print(f"public_url  {gw.public_url}")
    print(f"database    {gw.database_url.split('@')[-1]}")
    print(f"storage     {gw.storage_url}")
    for name, provider in settings.providers.items():
        print(f"provider    {name}: {provider.kind} {provider.base_url}")
    for route in settings.routes:
        print(f"route       {route.model}:{route.version or '*'} -> {route.provider}")
    return 0


async def _migrate(settings: Settings) -> None:
    engine = db.create_engine(settings.gateway.database_url)
    try:
        await db.migrate(engine)
    finally:
        await engine.dispose()


def _serve(settings: Settings) -> int:
    gw = settings.gateway
    context = None
    if gw.tls_cert_file and gw.tls_key_file:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(gw.tls_cert_file, gw.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"cannot load the TLS certificate: {exc}") from exc
    web.run_app(
        create_app(settings),
        host=gw.host,
        port=gw.port,
        ssl_context=context,
        print=None,
        access_log=None,
        shutdown_timeout=10.0,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
