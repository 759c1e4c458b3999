"""``cutover routes …``, ``cutover shadow report`` and ``cutover shadow replay`` against a
running gateway's admin API.

With ``--url https://gateway`` the commands need neither the database nor the
configuration file (whose secrets stay on the gateway's host): each one is a request to
the admin API (docs/canary.md, "Admin API"), authorized by the admin token held in the
environment variable that ``--admin-token-env`` names (never a command-line value, never
printed), and prints what the local form prints. The gateway audits every change with
that token's name, and a ``viewer`` token's change is refused there (403), so the remote
and local forms offer the same actions with the same preconditions; the console
(docs/console.md) is the third face of the same API.

TLS is verified: against certifi's authorities (or ``SSL_CERT_FILE``'s), and with
``--ca-file`` also a private CA. A refused certificate, a connection that cannot be made,
and every 4xx/5xx (its problem+json ``detail``) are one line on stderr and exit status 1;
a missing token variable is a usage error (2). Nothing is retried: a change that timed
out may or may not have been made, and ``cutover routes show`` says which.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import certifi
import httpx

from contracts.errors import ContractViolation, CutoverError
from gateway.rollout import printers

__all__ = ["add_options", "main", "parse_changes"]

TIMEOUT_S = 30.0
FOLLOW_S = 0.5  # how often a followed replay's progress is read
_ACTIONS = {"rollback": "rollback", "promote": "promote", "pause-guard": "pause-guard",
            "resume-guard": "resume-guard"}


class RemoteError(CutoverError):
    """The gateway refused or could not be reached; ``detail`` is the one line printed."""


def add_options(command: argparse.ArgumentParser) -> None:
    """``--url``, ``--admin-token-env`` and ``--ca-file`` on a ``routes``/``shadow`` command."""
    remote = command.add_argument_group("remote (through a gateway's admin API)")
    remote.add_argument("--url", help="the gateway's base URL, e.g. https://gateway:8443: "
                        "no database or config file needed")
    remote.add_argument("--admin-token-env", metavar="VAR",
                        help="the environment variable holding an admin token (with --url)")
    remote.add_argument("--ca-file", type=Path,
                        help="PEM file of the CA that signed the gateway's certificate")


def main(args: argparse.Namespace) -> int:
    """Run one command remotely; the exit status (see the module docstring)."""
    token = os.environ.get(args.admin_token_env or "", "") if args.admin_token_env else ""
    if not args.admin_token_env:
        print("cutover: --url needs --admin-token-env VAR, the environment variable that "
              "holds an admin token", file=sys.stderr)
        return 2
    if not token:
        print(f"cutover: the environment variable {args.admin_token_env} (--admin-token-env) "
              "is unset or empty", file=sys.stderr)
        return 2
    if args.ca_file is not None and not args.ca_file.is_file():
        print(f"cutover: --ca-file {args.ca_file} is not a file", file=sys.stderr)
        return 2
    verify: Any = True  # certifi's authorities, or SSL_CERT_FILE's (httpx's trust_env)
    if args.ca_file is not None:
        verify = ssl.create_default_context(cafile=certifi.where())
        try:
            verify.load_verify_locations(cafile=str(args.ca_file))
        except (ssl.SSLError, OSError) as exc:
            print(f"cutover: --ca-file {args.ca_file}: not a PEM certificate ({exc})",
                  file=sys.stderr)
            return 2
    base = args.url.rstrip("/")
    try:
        with httpx.Client(base_url=f"{base}/admin", verify=verify, timeout=TIMEOUT_S,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            return _run(_Admin(client, base), args)
    except CutoverError as exc:  # RemoteError, or a bad --set
        print(f"cutover: {exc.detail}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1


class _Admin:
    """The admin API's calls, each answer's JSON (or text) or a :class:`RemoteError`."""

    def __init__(self, client: httpx.Client, base: str) -> None:
        self._client = client
        self._base = base

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None) -> httpx.Response:
        try:
            response = self._client.request(method, path, json=body, params=params)
        except httpx.ConnectError as exc:
            raise RemoteError(f"cannot reach {self._base}: {_reason(exc)}") from None
        except httpx.TimeoutException:
            raise RemoteError(f"{self._base} did not answer within {TIMEOUT_S:g} s "
                              "(a change may have been made: see `routes show`)") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"{self._base}: {_reason(exc)}") from None
        if response.status_code >= 400:
            raise RemoteError(f"{_detail(response)} (HTTP {response.status_code})")
        return response

    def json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.call(method, path, body)
        try:
            return response.json()
        except ValueError:
            raise RemoteError(f"{self._base}{response.request.url.path} did not answer "
                              "JSON: is --url the gateway's?") from None


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return (f"{text.splitlines()[0]} (a private CA: --ca-file FILE or SSL_CERT_FILE)")
    return text.splitlines()[0]


def _detail(response: httpx.Response) -> str:
    try:
        problem = response.json()
    except ValueError:
        return response.reason_phrase or "the gateway refused"
    if isinstance(problem, dict):
        return str(problem.get("detail") or problem.get("title") or response.reason_phrase)
    return response.reason_phrase


def _route(key: str) -> str:
    """``/routes/{owner}/{name}`` of a route's name (``model`` or ``model:version``)."""
    if "/" not in key:
        raise RemoteError(f"route {key!r} must be owner/name or owner/name:version")
    return "/routes/" + quote(key, safe="/:")


def _run(admin: _Admin, args: argparse.Namespace) -> int:
    if args.command == "shadow":
        return _replay(admin, args) if args.action == "replay" else _report(admin, args)
    if args.action == "list":
        print(printers.listing(admin.json("GET", "/routes")["results"]))
        return 0
    if args.action == "show":
        shown = admin.json("GET", _route(args.route))
        print(json.dumps(shown, indent=2) if args.json else printers.show(shown))
        return 0
    if args.action == "translate":
        raise RemoteError("routes translate runs where the configuration is (it calls "
                          "nobody): run it without --url")
    body: dict[str, Any] = {"reason": args.reason}
    if args.action in ("set-canary", "set-shadow"):
        path = "/canary" if args.action == "set-canary" else "/shadow"
        entry = admin.json("POST", _route(args.route) + path, {**body, "percent": args.percent})
    elif args.action == "set-map":
        entry = admin.json("PATCH", _route(args.route), {**body, "maps": _maps(admin, args)})
    elif args.action == "change":
        entry = admin.json("PATCH", _route(args.route), {**body, **parse_changes(args.set)})
    else:
        entry = admin.json("POST", f"{_route(args.route)}/{_ACTIONS[args.action]}", body)
    print(f"{entry['route']}: {printers.summary(entry.get('before'), entry['after'])} "
          f"(change #{entry['id']} by {entry['who']}: {entry['reason']})")
    return 0


def _maps(admin: _Admin, args: argparse.Namespace) -> dict[str, Any]:
    """The route's maps with ``--provider``'s replaced (or removed), as ``set-map`` makes
    them locally (docs/translation.md)."""
    maps = dict(admin.json("GET", _route(args.route))["spec"].get("maps") or {})
    maps.pop(args.provider, None)
    if args.input is not None or args.output is not None:
        maps[args.provider] = {"input": args.input, "output": args.output}
    return maps


def parse_changes(pairs: list[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` pairs as a route change: VALUE is JSON when it parses
    (``0.05``, ``{"max_error_rate": 0.05}``, ``null``), else the text itself.

    Raises
    ------
    ContractViolation
        A pair without ``=`` or with an empty field name.
    """
    update: dict[str, Any] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or not field.strip():
            raise ContractViolation(f"--set {pair!r}: expected FIELD=VALUE, e.g. "
                                    "guard='{\"max_error_rate\": 0.05}'")
        try:
            update[field.strip()] = json.loads(value)
        except ValueError:
            update[field.strip()] = value
    return update


def _report(admin: _Admin, args: argparse.Namespace) -> int:
    params = {"format": args.format, **({"since": args.since} if args.since else {})}
    replay_id = getattr(args, "replay", None)
    path = (f"/replays/{quote(replay_id, safe='')}/report" if replay_id
            else "/shadow-report")
    _write(admin.call("GET", _route(args.route) + path, params=params).text, args)
    return 0


def _replay(admin: _Admin, args: argparse.Namespace) -> int:
    """``cutover shadow replay`` through the admin API, as :mod:`gateway.rollout.cli`
    does it on the store: start (or resume), follow, report; or ``--status``, ``--stop``."""
    replays = _route(args.route) + "/replays"
    if args.status or args.stop:
        shown = _chosen(admin, replays, args)
        if args.stop:
            shown = admin.json("POST", f"{replays}/{shown['id']}/stop")
        print(json.dumps(shown, indent=2) if args.format == "json"
              else printers.replay_line(shown))
        return 0
    listed = [] if args.new else admin.json("GET", replays)["results"]
    stopped = next((r for r in listed if r["state"] == "stopped"), None)
    if stopped is not None:
        shown = admin.json("POST", f"{replays}/{stopped['id']}/resume")
        print(f"resuming replay {shown['id']} (--new starts another)", file=sys.stderr)
    else:
        body = {"since": args.since, "limit": args.limit,
                "baseline_percent": args.baseline_percent}
        shown = admin.json("POST", replays, {k: v for k, v in body.items() if v is not None})
        print(f"started replay {shown['id']}: {shown['inputs']['total']} recorded inputs",
              file=sys.stderr)
    if args.detach:
        print(shown["id"])
        return 0
    progress = printers.ReplayProgress(sys.stderr)
    try:
        while shown["state"] == "running":
            progress.update(shown)
            time.sleep(FOLLOW_S)  # the pace of the progress line
            shown = admin.json("GET", f"{replays}/{shown['id']}")
        progress.update(shown)
    except KeyboardInterrupt:
        progress.close()
        print(f"replay {shown['id']} goes on in the gateway: --status to follow, --stop to "
              "stop it", file=sys.stderr)
        return 130
    if shown["state"] != "finished":
        print(f"replay {shown['id']} was {shown['state']} before it finished: run the "
              "command again to resume it", file=sys.stderr)
        return 1
    fmt = "md" if args.format == "text" else args.format
    _write(admin.call("GET", f"{replays}/{shown['id']}/report", params={"format": fmt}).text,
           args)
    return 0


def _chosen(admin: _Admin, replays: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.id:
        found: dict[str, Any] = admin.json("GET", f"{replays}/{quote(args.id, safe='')}")
        return found
    for shown in admin.json("GET", replays)["results"]:
        if not args.stop or shown["state"] == "running":
            return dict(shown)
    raise RemoteError(f"route {args.route!r} has no {'running ' if args.stop else ''}replay")


def _write(text: str, args: argparse.Namespace) -> None:
    fmt = "md" if args.format == "text" else args.format
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise RemoteError(f"cannot write --output {args.output}: {exc.strerror}") from None
        print(f"wrote the {fmt} report of {args.route} to {args.output}")
    else:
        print(text)
