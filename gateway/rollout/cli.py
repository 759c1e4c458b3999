"""``cutover routes``: list, show and change routes from the command line (docs/canary.md).

``cutover routes list``                               every route and its spec
``cutover routes show ROUTE``                          spec, per-arm numbers, audited changes
``cutover routes set-canary ROUTE PERCENT --reason T`` send PERCENT of callers to the candidate
``cutover routes rollback ROUTE --reason T``           canary back to 0
``cutover routes set-shadow ROUTE PERCENT --reason T`` shadow PERCENT of control predictions
``cutover routes promote ROUTE --reason T``            the candidate becomes the control
``cutover routes pause-guard|resume-guard ROUTE --reason T``  the guard stops/starts acting
``cutover routes set-map ROUTE --provider P [--input JQ] [--output JQ] --reason T``
                                                      the route's maps for P (docs/translation.md)
``cutover routes translate ROUTE --provider P --input JSON [--output JSON]``
                                                      a dry run of the route's maps and
                                                      schema checks (gateway/translation/dryrun.py)

``cutover shadow report --route R [--since T] [--replay ID] [--format md|json|html]
[--output FILE]``
                                                      the route's shadow-diff report (of
                                                      live traffic, or of one replay)
``cutover shadow replay ROUTE [--since 7d|T] [--limit N] [--baseline-percent P] [--new]
[--detach] [--format text|json|html] [--output FILE]``
                                                      replay the route's recorded inputs
                                                      on its candidate, follow its progress,
                                                      then print its report (a stopped
                                                      replay is resumed unless --new)
``cutover shadow replay ROUTE --status|--stop [--id ID]``  its progress; stop it

ROUTE is the route's ``model`` or ``model:version`` as written in the config. The commands
work on the configured database directly (``--config``), seeding it from the file first
like a starting gateway; running gateways pick a change up within 2 s. Changes are
audited with who = ``cli``. Bad input exits 1 with the reason and changes nothing; a
``--reason`` empty or over 1000 characters is a usage error (exit 2).

Standard output carries the answer alone; standard error only warnings and errors, as
text lines (not the gateway's JSON log lines): ``--verbose`` adds the info lines
(migrations applied, routes seeded), ``--log-level`` sets the level outright.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contracts.errors import CutoverError, NotFound
from gateway import assembly
from gateway.config import Settings
from gateway.rollout import remote
from gateway.rollout.control import RouteControl, reason_problem
from gateway.rollout.printers import ReplayProgress, replay_line
from gateway.rollout.printers import listing as _listing
from gateway.rollout.printers import show as _show
from gateway.rollout.printers import summary as _summary
from gateway.rollout.replay import ReplayControl
from gateway.rollout.router import Router
from gateway.rollout.shadowpairs import ShadowComparisons, report_since
from gateway.rollout.sync import seed
from gateway.storage import Storage
from gateway.store.engine import db
from gateway.store.replays import Replay, ReplayStore
from gateway.store.routes import RouteBook
from gateway.store.shadows import ShadowStore
from gateway.translation import dryrun

__all__ = ["add_commands", "log_setup", "run"]

FORMATS = ("md", "json", "html")
REPLAY_FORMATS = ("text", "md", "json", "html")
FOLLOW_S = 0.5  # how often a followed replay's progress is read

WHO = "cli"
REASON_HELP = "why, at most 1000 characters (kept in the audit)"


def add_commands(sub: Any, shared: Callable[[argparse.ArgumentParser], Any]) -> None:
    """Add ``routes`` and its actions to the ``cutover`` parser's subcommands (each with
    ``shared``'s options, ``--config`` and ``--log-level``)."""

    def common(command: argparse.ArgumentParser) -> Any:
        command.add_argument("-v", "--verbose", action="store_true",
                             help="also log info lines (migrations, seeding) to stderr")
        remote.add_options(command)
        return shared(command)

    routes = sub.add_parser("routes", help="list, show and change routes (canary, shadow)")
    actions = routes.add_subparsers(dest="action", required=True)
    common(actions.add_parser("list", help="every route and its spec"))
    show = common(actions.add_parser("show", help="one route: spec, numbers, changes"))
    show.add_argument("route", help="model or model:version, as in the config")
    show.add_argument("--json", action="store_true", help="print JSON")
    for name, text in (
        ("set-canary", "send PERCENT of callers to the candidate"),
        ("set-shadow", "shadow PERCENT of control predictions on the candidate"),
    ):
        command = common(actions.add_parser(name, help=text))
        command.add_argument("route")
        command.add_argument("percent", help="0 to 100")
        command.add_argument("--reason", required=True, type=_reason, help=REASON_HELP)
    mapping = common(actions.add_parser(
        "set-map", help="a provider's jq maps for the route (neither --input nor --output: "
        "remove them)"))
    mapping.add_argument("route")
    mapping.add_argument("--provider", required=True, help="a configured provider's name")
    mapping.add_argument("--input", help="the input map, a jq program")
    mapping.add_argument("--output", help="the output map, a jq program")
    mapping.add_argument("--reason", required=True, type=_reason, help=REASON_HELP)
    change = common(actions.add_parser(
        "change", help="any route fields: guard thresholds, shadow policy and budget, "
        "candidate, caller key (as PATCH /admin/routes/ROUTE)"))
    change.add_argument("route")
    change.add_argument("--set", action="append", required=True, metavar="FIELD=VALUE",
                        help="a field and its value (JSON, or text); repeat for more")
    change.add_argument("--reason", required=True, type=_reason, help=REASON_HELP)
    dryrun.add_command(actions, common)
    for name, text in (
        ("rollback", "canary back to 0"),
        ("promote", "the candidate becomes the control at 100 %; no candidate after"),
        ("pause-guard", "the guard keeps counting but never rolls back, until resumed"),
        ("resume-guard", "a paused guard acts again"),
    ):
        command = common(actions.add_parser(name, help=text))
        command.add_argument("route")
        command.add_argument("--reason", required=True, type=_reason, help=REASON_HELP)
    shadow = sub.add_parser("shadow", help="shadow runs: the shadow-diff report")
    shadow_actions = shadow.add_subparsers(dest="action", required=True)
    report = common(shadow_actions.add_parser("report", help="a route's shadow-diff report"))
    report.add_argument("--route", required=True, help="model or model:version")
    report.add_argument("--since", help="pairs created at or after this time (ISO 8601)")
    report.add_argument("--replay", metavar="ID", help="the report of this replay's pairs")
    report.add_argument("--format", choices=FORMATS, default="md")
    report.add_argument("--output", help="write to this file instead of standard output")
    replay = common(shadow_actions.add_parser(
        "replay", help="replay a route's recorded inputs on its candidate (and its control "
        "again, for the baseline): the same report before any live traffic"))
    replay.add_argument("route", help="model or model:version")
    replay.add_argument("--since", help="inputs recorded since: 7d, 12h, 90m or ISO 8601 "
                        "(default: every one kept)")
    replay.add_argument("--limit", type=int, help="at most this many inputs, newest first")
    replay.add_argument("--baseline-percent", type=float, metavar="P",
                        help="the share of inputs also sent to the control again "
                        "(default: the route's baseline_percent)")
    replay.add_argument("--new", action="store_true",
                        help="start a new replay even when a stopped one could be resumed")
    replay.add_argument("--detach", action="store_true",
                        help="start it and return: do not follow it to its report")
    replay.add_argument("--id", help="with --status or --stop: this replay (default: the "
                        "route's newest)")
    what = replay.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="print the replay's progress")
    what.add_argument("--stop", action="store_true", help="stop the running replay")
    replay.add_argument("--format", choices=REPLAY_FORMATS, default="text",
                        help="the report's (text is Markdown) or, with --status, the "
                        "progress's form")
    replay.add_argument("--output", help="write the report to this file")


def _reason(text: str) -> str:
    """``--reason``: empty or over the limit is a usage error (exit 2), before the store
    is opened (docs/canary.md 'Audit')."""
    if problem := reason_problem(text):
        raise argparse.ArgumentTypeError(problem)
    return text


def log_setup(args: argparse.Namespace) -> tuple[str, str]:
    """The (level, format) a ``routes`` or ``shadow`` command logs at: ``--log-level``,
    else INFO with ``--verbose``, else WARNING; always text (the answer is for a person).
    The configuration's ``[logging]`` is the serving gateway's, not the command's."""
    return args.log_level or ("INFO" if args.verbose else "WARNING"), "text"


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one ``routes`` action; the exit status comes back (errors propagate). The
    database engine and the owned storage it opens are closed before it returns."""
    engine = db.create_engine(settings.gateway.database_url,
                              statement_timeout_s=settings.gateway.database_statement_timeout_s)
    storage: Storage | None = None
    try:
        await db.migrate(engine)
        router = Router(settings.routes)
        book = RouteBook(engine, target_of=router.target,
                         operator=assembly.operator_outbox(settings))  # docs/webhooks.md
        await seed(book, router, settings.providers)
        control = RouteControl(book, routes=router.keys, providers=settings.providers)
        if args.command == "shadow":
            storage = assembly.storage_for(settings)
            pairs = ShadowComparisons(
                ShadowStore(engine), storage, public_url=settings.gateway.public_url,
            )
            replays = ReplayControl(ReplayStore(engine), router, control.spec)
            if args.action == "replay":
                return await _replay(replays, control, pairs, args)
            return await _report(control, pairs, args, replays)
        if args.action == "translate":
            return await dryrun.run(settings, await control.spec(args.route), args)
        return await _act(control, args)
    finally:
        if storage is not None:
            await storage.aclose()
        await engine.dispose()


async def _act(control: RouteControl, args: argparse.Namespace) -> int:
    if args.action == "list":
        print(_listing(await control.listing()))
    elif args.action == "show":
        shown = await control.describe(args.route)
        print(json.dumps(shown, indent=2) if args.json else _show(shown))
    else:
        if args.action == "set-canary":
            entry = await control.set_canary(args.route, args.percent, who=WHO, reason=args.reason)
        elif args.action == "set-shadow":
            entry = await control.set_shadow(args.route, args.percent, who=WHO, reason=args.reason)
        elif args.action == "change":
            entry = await control.change(args.route, remote.parse_changes(args.set), who=WHO,
                                         reason=args.reason)
        elif args.action == "set-map":
            entry = await control.set_map(args.route, args.provider, input_map=args.input,
                                          output_map=args.output, who=WHO, reason=args.reason)
        else:
            act = {"rollback": control.rollback, "promote": control.promote,
                   "pause-guard": control.pause_guard, "resume-guard": control.resume_guard}
            entry = await act[args.action](args.route, who=WHO, reason=args.reason)
        print(f"{entry.route}: {_summary(entry.before, entry.after)} "
              f"(change #{entry.id} by {entry.who}: {entry.reason})")
    return 0


async def _report(control: RouteControl, pairs: ShadowComparisons, args: Any,
                  replays: ReplayControl) -> int:
    spec = await control.spec(args.route)
    since = report_since(args.since, "--since")
    replay_id = getattr(args, "replay", None)  # a Namespace made by hand may lack it
    replay = await replays.get(args.route, replay_id) if replay_id else None
    text = await pairs.report(args.route, spec, since=since, fmt=args.format, replay=replay)
    await _write(text, args)
    return 0


async def _write(text: str, args: Any) -> None:
    """A report to ``--output`` (saying so) or to standard output."""
    fmt = "md" if args.format == "text" else args.format
    if args.output:
        try:
            await asyncio.to_thread(Path(args.output).write_text, text, encoding="utf-8")
        except OSError as exc:  # not "cannot reach the store", as the caller would say
            raise CutoverError(f"cannot write --output {args.output}: {exc.strerror}") from exc
        print(f"wrote the {fmt} report of {args.route} to {args.output}")
    else:
        print(text)


async def _replay(replays: ReplayControl, control: RouteControl, pairs: ShadowComparisons,
                  args: Any) -> int:
    """``cutover shadow replay``: on the store, only the replay's row is written (or
    changed); the serving gateway's replay loop does the work (gateway/rollout/replay.py)."""
    if args.status or args.stop:
        replay = await _chosen(replays, args)
        if args.stop:
            replay = await replays.stop(args.route, replay.id)
        if args.format == "json":
            print(json.dumps(replay.to_json(), indent=2))
        else:
            print(replay_line(replay.to_json()))
        return 0
    stopped = None if args.new else await replays.replays.latest(args.route, "stopped")
    if stopped is not None:
        replay = await replays.resume(args.route, stopped.id)
        print(f"resuming replay {replay.id} (--new starts another)", file=sys.stderr)
    else:
        replay = await replays.start(args.route, since=args.since, limit=args.limit,
                                     baseline_percent=args.baseline_percent, who=WHO)
        print(f"started replay {replay.id}: {replay.total} recorded inputs", file=sys.stderr)
    if args.detach:
        print(replay.id)
        return 0
    progress = ReplayProgress(sys.stderr)
    try:
        while replay.state == "running":
            progress.update(replay.to_json())
            await asyncio.sleep(FOLLOW_S)  # the pace of the progress line
            replay = await replays.get(args.route, replay.id)
        progress.update(replay.to_json())
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.close()
        print(f"replay {replay.id} goes on in the gateway: --status to follow, --stop to "
              "stop it", file=sys.stderr)
        raise
    if replay.state != "finished":
        print(f"replay {replay.id} was {replay.state} before it finished: run the command "
              "again to resume it", file=sys.stderr)
        return 1
    spec = await control.spec(args.route)
    fmt = "md" if args.format == "text" else args.format
    text = await pairs.report(args.route, spec, fmt=fmt, replay=replay)  # type: ignore[arg-type]
    await _write(text, args)
    return 0


async def _chosen(replays: ReplayControl, args: Any) -> Replay:
    """``--id``'s replay, else the route's newest (the running one, for ``--stop``)."""
    if args.id:
        return await replays.get(args.route, args.id)
    found = await replays.replays.latest(args.route, "running" if args.stop else None)
    if found is None:
        raise NotFound(f"route {args.route!r} has no {'running ' if args.stop else ''}replay")
    return found
