"""Drift: routes whose live spec (in the store) differs from the config file, and the
``[[routes]]`` TOML that would make the file match (``cutover check``; docs/canary.md,
"Drift").

A route changed live (``cutover routes``, the admin API, the console, the guard) keeps its
live spec over later edits of its file entry (docs/canary.md, "Which wins"), so the file
drifts, most of all after a promote. :func:`find` reads the store without changing it (no
migration, no seeding, no SQLite file created) and :func:`render` prints each drifted
route with the entry to paste in place of the file's. ``target`` and ``candidate_target``
follow their provider: after a promote the new control keeps the old candidate's target.
A paused guard is live-only state: noted, not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tomli_w

from gateway.config import RouteSettings, Settings
from gateway.rollout.spec import AuditEntry, RouteSpec, route_key
from gateway.store.engine import db
from gateway.store.routes import RouteBook

__all__ = ["Drift", "entry", "find", "render"]

_LIVE_ONLY = ("guard_paused",)


@dataclass(frozen=True)
class Drift:
    """One route whose store differs from the file: the differing spec ``fields``, the
    file entry that would match (``None`` when only live-only state differs) and the
    route's last audited change."""

    route: str
    fields: tuple[str, ...]
    entry: dict[str, Any] | None
    last: AuditEntry | None


def entry(route: RouteSettings, live: RouteSpec) -> dict[str, Any]:
    """The ``[[routes]]`` table that seeds ``live``: the file's entry as written, with the
    live value of every spec field that differs (see the module docstring)."""
    written = route.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    if "caller_key" in written:
        written["caller_key"] = str(route.caller_key)
    filed, now = route.spec().stored(), live.stored()
    for field, value in now.items():
        if field not in _LIVE_ONLY and value != filed.get(field):
            written[field] = value
    named = {route.provider: route.target}
    if route.candidate:
        named[route.candidate] = route.candidate_target
    written["target"] = named.get(live.provider)
    written["candidate_target"] = named.get(live.candidate) if live.candidate else None
    table = {k: _without_none(written[k]) for k in RouteSettings.model_fields if k in written}
    return {k: v for k, v in table.items() if v is not None}


def _without_none(value: Any) -> Any:
    """TOML has no null: a None is a field left out."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


async def find(settings: Settings) -> list[Drift] | str:
    """Every configured route whose store spec differs from the file, or why the store
    was not read (no SQLite file yet, no routes table: never served)."""
    url = settings.gateway.database_url
    if (missing := db.missing_file(url)) is not None:
        return f"the store {missing} does not exist yet: nothing was changed live"
    engine = db.create_engine(
        url, statement_timeout_s=settings.gateway.database_statement_timeout_s)
    try:
        book = RouteBook(engine)
        _, stored = await book.load()
        found = []
        for route in settings.routes:
            key = route_key(route.model, route.version)
            live = stored.get(key)
            if live is None:
                continue
            filed, now = route.spec().stored(), live.stored()
            fields = tuple(k for k in sorted(set(filed) | set(now)) if filed.get(k) != now.get(k))
            if not fields:
                continue
            history = await book.history(key, limit=1)
            last = history[0] if history else None
            table = entry(route, live) if set(fields) - set(_LIVE_ONLY) else None
            found.append(Drift(key, fields, table, last))
        return found
    finally:
        await engine.dispose()


def render(drifts: list[Drift]) -> str:
    """``drift`` lines, then the TOML of the entries to put in the file instead."""
    if not drifts:
        return "drift       none: every route's live state matches the config file"
    lines = []
    for d in drifts:
        last = (f"; last change #{d.last.id} {d.last.action} by {d.last.who} at "
                f"{d.last.at:%Y-%m-%d %H:%M:%S} UTC: {d.last.reason}") if d.last else ""
        lines.append(f"drift       {d.route}: the store differs from the file in "
                     f"{', '.join(d.fields)}{last}")
        if "guard_paused" in d.fields:
            lines.append(f"            {d.route}: its guard is paused live (`cutover routes "
                         "resume-guard`); the file has no such setting")
    tables = [d.entry for d in drifts if d.entry is not None]
    if tables:
        lines += ["", "# To make the config file match the store, replace these [[routes]] "
                  "entries with:", tomli_w.dumps({"routes": tables}).rstrip()]
    return "\n".join(lines)
