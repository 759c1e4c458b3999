"""cutover: a Replicate-compatible gateway in front of other inference providers.

``cutover serve --config FILE``  run the gateway (HTTPS when a certificate is configured)
``cutover migrate --config FILE``  apply the store's migrations and exit
``cutover check --config FILE``  validate the configuration, print a summary and the drift
``cutover health [--config FILE]``  GET /ready where ``serve`` listens (:mod:`gateway.healthcheck`)
``cutover chaos [--predictions N] [--profile FILE] [--database-url URL]``  the chaos run
``cutover webhooks list-dead [--since T] [--until T] [--limit N]``  dead-lettered webhooks
``cutover webhooks show ID``  one webhook event (outbox id or msg_ id), with its payload
``cutover webhooks replay ID | --since T [--until T]``  send dead events again
``cutover routes list | show | set-canary | set-shadow | rollback | promote | pause-guard``

The ``webhooks`` commands work directly on the configured database (``--config``), so
they also work while no gateway runs; a running gateway sends replayed events within
its loop interval. Times are ISO 8601 (``2026-05-01T12:00:00Z``; no zone means UTC).
The ``routes`` commands are described in :mod:`gateway.rollout.cli` (docs/canary.md).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import re
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from contracts.errors import ConfigurationError, CutoverError
from contracts.times import parse_time
from gateway import app, healthcheck, logs, providers
from gateway.clock import utcnow
from gateway.config import Settings, load_settings
from gateway.config import checks as startchecks
from gateway.config import tenants as tenancy
from gateway.config.envnames import ignored_environment
from gateway.legacy import importcli
from gateway.rollout import cli as routecli
from gateway.rollout import drift as routedrift
from gateway.rollout import remote
from gateway.store.deadletters import DeadLetterRows
from gateway.store.engine import db
from gateway.validation import schema_problem, schema_unknown
from gateway.webhooks.deadletter import DEFAULT_LIMIT, MAX_LIMIT, DeadLetters, table

__all__ = ["main", "readiness_problems"]

log = logging.getLogger("gateway.cli")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _parser(*, serve_only: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cutover", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run the gateway"),
        ("migrate", "apply database migrations and exit"),
        ("check", "validate the configuration"),
    )[: 1 if serve_only else None]:
        _common(sub.add_parser(name, help=text))
    serve = sub.choices["serve"]
    serve.add_argument(
        "--listen-fd", type=int, default=None, metavar="FD",
        help="serve on this inherited, already listening socket instead of binding "
        "[gateway] listen (for a supervisor or test harness that bound it)",
    )
    if serve_only:
        return parser
    sub.add_parser("health", help="exit 0 when the gateway configured like serve is ready "
                   "(cutover health --help)", add_help=False)
    sub.add_parser("chaos", help="run the gateway under faults and check every promise "
                   "(cutover chaos --help)", add_help=False)
    hooks = sub.add_parser("webhooks", help="dead-lettered outbound webhooks")
    actions = hooks.add_subparsers(dest="action", required=True)
    listing = _common(actions.add_parser("list-dead", help="list dead-lettered events"))
    listing.add_argument("--since", help="created at or after this time (ISO 8601)")
    listing.add_argument("--until", help="created before this time (ISO 8601)")
    listing.add_argument("--limit", type=_limit, default=DEFAULT_LIMIT)
    show = _common(actions.add_parser("show", help="one event, with its payload"))
    show.add_argument("id", help="outbox id or msg_ webhook id")
    replay = _common(actions.add_parser("replay", help="send dead events again"))
    replay.add_argument("id", nargs="?", help="outbox id or msg_ webhook id")
    replay.add_argument("--since", help="replay dead events created at or after this time")
    replay.add_argument("--until", help="... and before this time (default: now)")
    routecli.add_commands(sub, _common)
    importcli.add_command(sub, _common)
    return parser


# Commands whose whole point is the configured store: on the default ./cutover.db by
# mistake (no --config) they answered from an empty database they had just created.
_ON_THE_STORE = frozenset({"migrate", "webhooks", "routes", "shadow", "import"})


def _common(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
    command.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("CUTOVER_CONFIG") or None,  # empty: unset, not "."
        help="TOML configuration file (default: $CUTOVER_CONFIG)",
    )
    command.add_argument("--log-level", default=None, type=str.upper, choices=LEVELS,
                         help="overrides [logging] level (INFO)")
    return command


def main(argv: Sequence[str] | None = None) -> int:
    """The ``cutover`` command (the console script, :mod:`gateway.console`, imports this
    module with the collector paused, then calls it); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["chaos"]:
        from chaos import cli as chaos_cli

        return chaos_cli.main(argv[1:])
    if argv[:1] == ["health"]:
        return healthcheck.main(argv[1:])
    # serve parsed by its own parser alone: building them all was ~3 ms of each start
    # (docs/benchmarks.md); what it does not know, the whole parser reports
    parser = _parser(serve_only=argv[:1] == ["serve"])
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser = _parser()
        args = parser.parse_args(argv)
    if args.command in ("routes", "shadow") and args.url:  # the admin API: no store, no config
        return remote.main(args)
    _check_usage(parser, args)
    logs.configure(args.log_level or "INFO")
    try:
        settings = load_settings(args.config)
        logs.configure(args.log_level or settings.logging.level or "INFO", settings.logging.format)
        if args.command == "webhooks":
            return asyncio.run(_webhooks(settings, args))
        if args.command == "import":
            return asyncio.run(importcli.run(settings, args))
        if args.command in ("routes", "shadow"):
            return _routes(settings, args)
        if args.command == "check":
            return _check(settings, args.config)
        if args.command == "migrate":
            return asyncio.run(_migrate(settings)) or 0
        return _serve(settings, args.listen_fd)
    except CutoverError as exc:  # ConfigurationError above all: one line, not a traceback
        print(f"cutover: {exc.detail}", file=sys.stderr)
        return 2


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors the parser cannot see (exit 2)."""
    if args.command in ("routes", "shadow") and (args.admin_token_env or args.ca_file):
        parser.error("--admin-token-env and --ca-file go with --url (the admin API of a "
                     "running gateway)")
    if args.command == "webhooks" and args.action == "replay" and (args.id is None) == (
        args.since is None
    ):
        parser.error("webhooks replay takes an ID or --since, exactly one of them "
                     "(an ID: one event; --since: a time range)")
    if (args.command in _ON_THE_STORE and args.config is None
            and not os.environ.get("CUTOVER_GATEWAY__DATABASE_URL")):
        parser.error(f"'cutover {args.command}' works on the gateway's database: give its "
                     "configuration with --config FILE (or $CUTOVER_CONFIG); without one "
                     "it would create and use ./cutover.db")


def _routes(settings: Settings, args: argparse.Namespace) -> int:
    logs.configure(*routecli.log_setup(args))  # the answer, not the gateway's JSON lines
    try:
        return asyncio.run(routecli.run(settings, args))
    except CutoverError as exc:  # unknown route, bad percent: the reason, exit 1
        print(f"cutover: {exc.detail}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `cutover routes list | head -1`: not the store's fault
        return _stdout_closed()
    except (db.StoreError, OSError) as exc:
        print(f"cutover: {_unreachable(settings, exc)}", file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of our output went away: stop quietly (the Python docs' recipe)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


def _unreachable(settings: Settings, exc: Exception) -> str:
    """Why a command could not use the store, naming it (without its password)."""
    where = re.sub(r"//[^/@]*@", "//", settings.gateway.database_url)
    cause = getattr(exc, "orig", None) or exc  # the driver's: 'database "x" does not exist'
    said = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    shown = isinstance(cause, OSError) or cause is not exc  # a StoreError's own text is SQL
    name = type(cause.__cause__ or cause).__name__  # asyncpg's, under SQLAlchemy's adapter
    why = f"{name}: {said}" if shown and said else name
    return f"cannot reach the store at {where} ({why}); is the database up?"


def _check(settings: Settings, path: Path | None) -> int:
    """Print a summary; exit 1 when the gateway could not serve anything as configured."""
    problems = readiness_problems(settings) + _tls_problems(settings)
    problems += startchecks.storage_problems(gw := settings.gateway)
    problems += startchecks.ca_file_problems(settings.providers)
    problems += startchecks.operator_webhook_problems(settings.operator_webhook)
    for problem in problems:
        print(f"cutover: {problem}", file=sys.stderr)
    for ignored in ignored_environment(Settings.model_fields):
        print(f"cutover: warning: {ignored}", file=sys.stderr)
    for route in settings.routes:
        provider_conf = settings.providers.get(route.provider)
        kind = provider_conf.kind if provider_conf else None
        if (unknown := schema_unknown(route.openapi_schema, kind)) is not None:
            name = f"{route.model}:{route.version}" if route.version else route.model
            print(f"cutover: warning: route {name}: {unknown}", file=sys.stderr)
    print(f"config      {path or 'none (no --config nor $CUTOVER_CONFIG): defaults'}"
          " + CUTOVER_* environment")
    print(f"listen      {gw.listen} ({'https' if gw.tls_cert_file else 'http'})")
    print(f"public_url  {gw.public_url}")
    print(f"database    {gw.database_url.split('@')[-1]}")
    print(f"storage     {gw.storage_url}{startchecks.local_dir(gw.storage_url)}")
    for name, provider in settings.providers.items():
        where = provider.base_url or "(the provider's public API)"
        print(f"provider    {name}: {provider.kind} {where}")
    for route in settings.routes:
        target = f" ({route.target})" if route.target else ""
        moving = f", candidate {route.candidate}" if route.candidate else ""  # the file's
        only = f", tenants {', '.join(route.tenants)}" if route.tenants else ""
        print(f"route       {route.model}:{route.version or '*'} -> {route.provider}{target}"
              f"{moving}{only}")
    for tenant in settings.tenants:  # docs/security.md
        print(f"tenant      {tenant.name}: {len(tenant.api_tokens)} API token(s)")
    if (hook := settings.operator_webhook) is not None:  # docs/webhooks.md
        print(f"operator    webhook {hook.url}: {', '.join(hook.events) or 'every route event'}")
    print(_drift(settings))
    return 1 if problems else 0


def _drift(settings: Settings) -> str:
    """Routes changed live away from the file, with the TOML that would match them
    (:mod:`gateway.rollout.drift`); a store that cannot be read is said, not fatal."""
    try:
        found = asyncio.run(routedrift.find(settings))
    except (db.StoreError, OSError) as exc:
        return f"drift       not checked: {_unreachable(settings, exc)}"
    if isinstance(found, str):
        return f"drift       not checked: {found}"
    return routedrift.render(found)


def readiness_problems(settings: Settings) -> list[str]:
    """What stops a gateway with ``settings`` from serving predictions."""
    problems = []
    if not settings.providers:
        problems.append("no [providers.NAME] configured: there is nothing to send work to")
    if not settings.routes:
        problems.append("no [[routes]] configured: every create would be 404")
    if not tenancy.api_tokens(settings):  # named_api_tokens and [[tenants]] count too
        problems.append("no [gateway] api_tokens: every API request would be 401")
    token_envs = {name: conf.token_env for name, conf in settings.providers.items()}
    problems.extend(providers.missing_credentials(token_envs, os.environ))
    for route in settings.routes:
        if (why := schema_problem(route.openapi_schema)) is not None:
            name = f"{route.model}:{route.version}" if route.version else route.model
            problems.append(f"route {name}: {why}: every create on it would fail")
    return problems


def _tls_problems(settings: Settings) -> list[str]:
    """Why ``serve`` could not load the configured certificate (missing file, bad PEM)."""
    try:
        _tls_context(settings)
    except ConfigurationError as exc:
        return [exc.detail]
    return []


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP; ConfigurationError naming the files."""
    gw = settings.gateway
    if not (gw.tls_cert_file and gw.tls_key_file):  # config: both or neither
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(gw.tls_cert_file, gw.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(
            f"cannot load the TLS certificate [gateway] tls_cert_file = {gw.tls_cert_file} "
            f"with tls_key_file = {gw.tls_key_file}: {why} (PEM files; leave both out to "
            "serve plain HTTP)"
        ) from exc
    return context


async def _migrate(settings: Settings) -> None:
    # no statement timeout: migrating a large table may take minutes (docs/reliability.md)
    engine = db.create_engine(settings.gateway.database_url, statement_timeout_s=None)
    try:
        await db.migrate(engine)
    finally:
        await engine.dispose()


async def _webhooks(settings: Settings, args: argparse.Namespace) -> int:
    engine = db.create_engine(settings.gateway.database_url,
                              statement_timeout_s=settings.gateway.database_statement_timeout_s)
    letters = DeadLetters(DeadLetterRows(engine))
    try:
        if args.action == "list-dead":
            found = await letters.list_dead(
                since=parse_time(args.since, "--since") if args.since else None,
                until=parse_time(args.until, "--until") if args.until else None,
                limit=args.limit,
            )
            shown = table(found, tenants=bool(settings.tenants))
            print(shown if found else "no dead-lettered webhook events")
        elif args.action == "show":
            print(json.dumps((await letters.get(args.id)).to_json(), indent=2))
        elif args.id is not None:
            letter = await letters.replay(args.id)
            print(f"replayed event {letter.id} ({letter.msg_id}) to {letter.url}")
        else:
            since = parse_time(args.since, "--since")
            until = parse_time(args.until, "--until") if args.until else None
            ids = await letters.replay_range(since=since, until=until or utcnow())
            print(f"replayed {len(ids)} event(s): {' '.join(map(str, ids)) or '-'}")
        return 0
    except CutoverError as exc:
        print(f"cutover: {exc.detail}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _stdout_closed()
    except (db.StoreError, OSError) as exc:  # OSError: asyncpg cannot connect
        print(f"cutover: {_unreachable(settings, exc)}", file=sys.stderr)
        return 1
    finally:
        await engine.dispose()


def _serve(settings: Settings, listen_fd: int | None = None) -> int:
    gw = settings.gateway
    context = _tls_context(settings)
    for problem in startchecks.operator_webhook_problems(settings.operator_webhook):
        raise ConfigurationError(problem)  # it would sign nothing: never started
    for problem in readiness_problems(settings):
        log.warning("configuration_incomplete", extra={"problem": problem})
    for ignored in ignored_environment(Settings.model_fields):
        log.warning("environment_ignored", extra={"problem": ignored})
    scheme = "https" if context is not None else "http"
    log.info(
        "gateway_starting",
        extra={"listen": f"{scheme}://{gw.listen}", "public_url": gw.public_url},
    )
    try:
        sock = socket.socket(fileno=listen_fd) if listen_fd is not None else None
    except OSError as exc:  # it was this traceback
        raise ConfigurationError(f"--listen-fd {listen_fd} is not an open socket: "
                                 f"{os.strerror(exc.errno or 0)}") from exc
    if sock is None:
        startchecks.resolvable(gw)
    elif sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):  # its binder's backlog
        sock.listen(gw.listen_backlog)  # made as deep as a socket the gateway binds itself
    try:
        app.serve(settings, ssl_context=context, sock=sock)
    except (ConnectionError, socket.gaierror, db.StoreError) as exc:  # at start: the store
        raise ConfigurationError(f"cannot start: {_unreachable(settings, exc)}") from exc
    except OSError as exc:  # the port is taken, or the host is not this machine's
        if sock is not None or exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
            raise
        raise ConfigurationError(
            f"cannot listen on [gateway] listen = {gw.listen}: {os.strerror(exc.errno)} "
            "(another process has that port, or the address is not one of this machine's)"
        ) from exc
    return 0


def _limit(text: str) -> int:
    """``--limit``: a bad one is a usage error (exit 2, docs/webhooks.md), as ``abc`` was."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 1 to {MAX_LIMIT}")
    return int(text)


if __name__ == "__main__":
    raise SystemExit(main())
