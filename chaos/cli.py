"""``cutover chaos``: run the gateway under a fault profile and check every promise.

    cutover chaos [--predictions N] [--profile FILE] [--database-url URL]
                  [--gateways N] [--kills N] [--victim I] [--seed N] [--json FILE]
                  [--workdir DIR]

Exit status: 0 when every promise held, 1 when one broke (each violation is printed with
its prediction id), 2 for bad arguments. ``--break-invariant`` corrupts one file output
on purpose, to show that the checks catch it. See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from chaos import run as chaos_run
from chaos.profile import ProfileError, load_profile

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cutover chaos", description="run the gateway under faults and check every promise"
    )
    parser.add_argument("--predictions", type=int, default=1000, help="how many (1000)")
    parser.add_argument("--profile", type=Path, help="fault profile (TOML); default profile")
    parser.add_argument("--database-url", help="the gateways' database (a SQLite file)")
    parser.add_argument("--gateways", type=int, default=1, help="gateway processes (1)")
    parser.add_argument("--kills", type=int, default=0, help="SIGKILL+restart this many times")
    parser.add_argument("--victim", type=int, help="kill only this gateway (0-based index)")
    parser.add_argument("--seed", type=int, help="repeat a run's random plan")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--workdir", type=Path, help="keep logs, config and assets here")
    parser.add_argument("--break-invariant", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cutover chaos``; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.predictions < 1 or args.gateways < 1 or args.kills < 0:
        parser.error("--predictions and --gateways must be positive, --kills not negative")
    if args.victim is not None and not 0 <= args.victim < args.gateways:
        parser.error("--victim must name one of the --gateways (0-based)")
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        print(f"cutover chaos: {exc}", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cutover-chaos-"))
    options = chaos_run.Options(
        workdir=workdir, predictions=args.predictions, profile=profile,
        database_url=args.database_url, gateways=args.gateways, kills=args.kills,
        victim=args.victim, seed=args.seed, break_invariant=args.break_invariant,
    )
    report = asyncio.run(chaos_run.run(options))
    print(report.text())
    if args.json:
        args.json.write_text(report.json() + "\n")
    if report.ok and args.workdir is None:  # the report named it: say it is gone
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"(removed {workdir} after a clean run; --workdir DIR keeps the logs)")
    return 0 if report.ok else 1
