"""The text the ``cutover routes`` commands print, the same whether they ran on the store
or through a gateway's admin API (:mod:`gateway.rollout.remote`): a route listing, one
route's spec, per-arm numbers and changes, and a change's one-line summary."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ReplayProgress", "listing", "replay_line", "show", "summary"]


def _pct(value: float) -> str:
    return f"{value:g}%"


def summary(before: dict[str, Any] | None, after: dict[str, Any]) -> str:
    if before is None:
        return "seeded"
    moved = [f"{k} {_text(before.get(k))} -> {_text(after[k])}"
             for k in after if before.get(k) != after[k]]
    return "; ".join(moved) or "no change"


def _text(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def listing(rows: list[dict[str, Any]]) -> str:
    head = ("ROUTE", "CONTROL", "CANDIDATE", "CANARY", "SHADOW", "GUARD")
    table: list[tuple[str, ...]] = [head] + [
        (r["route"], r["spec"]["provider"], r["spec"]["candidate"] or "-",
         _pct(r["spec"]["canary_percent"]), _pct(r["spec"]["shadow_percent"]),
         "on" if r["spec"]["guard"] else "off")
        for r in rows
    ]
    return _aligned(table)


def _aligned(table: list[tuple[str, ...]]) -> str:
    """Rows of cells as text columns, each as wide as its widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in table)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def _maps(maps: dict[str, Any]) -> list[str]:
    """``maps        PROVIDER input: JQ`` lines (docs/translation.md), or ``maps  none``."""
    lines = [f"maps        {provider} {side}: {programs[side]}"
             for provider, programs in sorted(maps.items())
             for side in ("input", "output") if programs.get(side) is not None]
    return lines or ["maps        none"]


def show(shown: dict[str, Any]) -> str:
    spec = shown["spec"]
    lines = [
        f"route       {shown['route']}",
        f"control     {spec['provider']}",
        f"candidate   {spec['candidate'] or '-'}",
        f"canary      {_pct(spec['canary_percent'])} (caller key: {spec['caller_key']})",
        f"shadow      {_pct(spec['shadow_percent'])}",
        f"guard       {_text(spec['guard']) if spec['guard'] else 'off'}"
        f"{' (paused)' if spec.get('guard_paused') else ''}",
        *_maps(spec.get("maps") or {}),
        "",
    ]
    arms: list[tuple[str, ...]] = [
        (f"since {shown.get('since') or '-'}", "ARM", "PROVIDER", "COUNT", "FAILED", "STUCK",
         "ERROR", "P50", "P95")
    ]
    for arm, s in shown["arms"].items():
        rate = "-" if s["error_rate"] is None else f"{s['error_rate']:.1%}"
        arms.append(("", arm, s["provider"], str(s["count"]), str(s["failed"]),
                     str(s["stuck"]), rate,
                     _ms(s["p50_s"]), _ms(s["p95_s"])))
    lines += [_aligned(arms), "", "changes (newest first):"]
    for c in shown["changes"]:
        lines.append(f"  #{c['id']} {c['at']} {c['who']} {c['action']}: "
                     f"{summary(c['before'], c['after'])}; reason: {c['reason']}")
    return "\n".join(lines)


def replay_line(shown: dict[str, Any]) -> str:
    """One replay's progress in a line (:meth:`gateway.store.replays.Replay.to_json`):
    ``replay ID running [#####.....] 50% 100/200 inputs (3 skipped), 110/120 jobs
    done``; the same from the store and through the admin API."""
    inputs, made = shown["inputs"], shown["jobs"]
    width = 20
    filled = round(shown["progress"] * width)
    handed = inputs["total"] - inputs["left"]
    line = (f"replay {shown['id']} {shown['state']} [{'#' * filled}{'.' * (width - filled)}] "
            f"{shown['progress']:.0%} {handed}/{inputs['total']} inputs "
            f"({inputs['skipped']} skipped), {made['done']}/{made['created']} jobs done")
    return line + (f", {made['dropped']} dropped" if made["dropped"] else "")


class ReplayProgress:
    """Writes a replay's progress to ``stream`` as it changes: one line rewritten in
    place on a terminal, else a new line at each tenth of the way and at each state."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last: tuple[str, int] | None = None

    def update(self, shown: dict[str, Any]) -> None:
        step = (shown["state"], int(shown["progress"] * 10))
        if self._tty:
            self._stream.write("\r" + replay_line(shown) + "\x1b[K")
            if shown["state"] != "running":
                self._stream.write("\n")
        elif step != self._last:
            self._stream.write(replay_line(shown) + "\n")
        self._stream.flush()
        self._last = step

    def close(self) -> None:
        if self._tty and self._last is not None and self._last[0] == "running":
            self._stream.write("\n")
            self._stream.flush()
