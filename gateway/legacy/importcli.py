"""``cutover import --from LEGACY --since 30d [--limit N]`` (docs/cutover-day.md,
"Importing history"): the legacy provider's finished predictions into the store, with a
progress line per page on stderr and a summary on stdout; exit 0, or 1 with the reason."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from contracts.auth import DEFAULT_TENANT
from contracts.errors import ConfigurationError, ContractViolation
from gateway import assembly
from gateway.clock import SYSTEM_CLOCK
from gateway.config import Settings
from gateway.files.outputs import OutputCopier
from gateway.legacy.history import ImportSummary, PredictionLister, import_history
from gateway.providers import build_adapter, credential
from gateway.rollout import replay
from gateway.store.engine import db

__all__ = ["add_command", "parse_since", "run"]


def add_command(sub: Any, shared: Callable[[argparse.ArgumentParser], Any]) -> None:
    """Add ``import`` to the ``cutover`` parser's subcommands."""
    command = shared(sub.add_parser(
        "import", help="import the legacy provider's finished predictions"))
    command.add_argument("--from", dest="source", required=True, metavar="LEGACY",
                         help="the provider (kind replicate) to read the predictions of")
    command.add_argument("--since", required=True,
                         help="how far back: 30d, 12h, 90m, or an ISO 8601 time")
    command.add_argument("--limit", type=int, default=None,
                         help="import at most this many predictions")
    command.add_argument("--tenant", default=DEFAULT_TENANT,
                         help="the tenant the predictions belong to (default: default)")


def parse_since(text: str, now: datetime) -> datetime:
    """``30d``/``12h``/``90m`` before ``now``, or an ISO 8601 time (as ``cutover shadow
    replay --since``: :func:`gateway.rollout.replay.parse_since`).

    Raises ``ContractViolation`` for anything else, or a time after ``now``.
    """
    return replay.parse_since(text, now)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one import; the exit status comes back (errors propagate)."""
    conf = settings.providers.get(args.source)
    if conf is None or conf.kind != "replicate":
        raise ConfigurationError(f"--from {args.source!r} names no provider of kind "
                                 "'replicate' in the configuration")
    if args.tenant != DEFAULT_TENANT and args.tenant not in {t.name for t in settings.tenants}:
        raise ConfigurationError(f"--tenant {args.tenant!r} is not a [[tenants]] entry")
    if args.limit is not None and args.limit < 1:
        raise ContractViolation("--limit must be at least 1")
    since = parse_since(args.since, SYSTEM_CLOCK.now())
    gw = settings.gateway
    engine = db.create_engine(gw.database_url,
                              statement_timeout_s=gw.database_statement_timeout_s)
    storage = assembly.storage_for(settings)
    adapter = build_adapter(args.source, conf.kind, token=credential(conf.token_env),
                            **conf.adapter_options())
    try:
        await db.migrate(engine)
        copier = OutputCopier(storage=storage, public_url=gw.public_url,
                              max_output_bytes=gw.max_output_bytes,
                              allowed_types=gw.allowed_output_types,
                              download_timeout_s=gw.output_download_timeout_s)
        summary = await import_history(
            provider=args.source, tenant=args.tenant,
            lister=cast(PredictionLister, adapter), engine=engine, copier=copier,
            file_hosts=assembly.output_file_hosts(settings)[args.source], since=since,
            limit=args.limit, progress=_progress,
        )
    finally:
        await adapter.aclose()
        await storage.aclose()
        await engine.dispose()
    print(summary.line())
    return 0


def _progress(summary: ImportSummary) -> None:
    print(f"page {summary.pages}: {summary.imported} imported, {summary.already} already "
          f"stored, {summary.seen} seen", file=sys.stderr, flush=True)
