"""The text the ``cutover routes`` commands print, the same whether they ran on the store
or through a gateway's admin API (:mod:`gateway.rollout.remote`): a route listing, one
route's spec, per-arm numbers and changes, and a change's one-line summary."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["listing", "show", "summary"]


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
