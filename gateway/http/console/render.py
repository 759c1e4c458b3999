"""Rendering the console: Jinja2 templates (package data, autoescaped), the security
headers of every page, and error pages (docs/console.md, "Pages").

Every console response carries a strict Content-Security-Policy (scripts, styles and
frames from the console's own origin only, no inline script or style, forms posting
only to it, never framed by another page), ``Cache-Control: no-store`` and
``Referrer-Policy: same-origin``; the shadow report keeps its own policy and is framed
only by the console.
"""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web

from gateway.http import keys
from gateway.http.console.session import PREFIX, SignedIn
from gateway.rollout.control import MAX_REASON_CHARS

__all__ = ["SIGNED_IN", "TEMPLATES", "environment", "page", "report_response",
           "template_response"]

SIGNED_IN = web.RequestKey("console_signed_in", SignedIn)
TEMPLATES = web.AppKey("console_templates", jinja2.Environment)

_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'")
_REPORT_CSP = ("default-src 'none'; img-src 'self' data: http: https:; "
               "style-src 'unsafe-inline'; frame-ancestors 'self'")  # framed sandboxed
HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer made Chromium post "Origin: null"
    "Cache-Control": "no-store",
}


def environment() -> jinja2.Environment:
    """The console's template environment (templates shipped in the package)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gateway.http.console", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = short_route
    return env


def short_route(key: str) -> str:
    """A route's name with its version id cut to 12 digits (the page's title has it all)."""
    model, sep, version = key.partition(":")
    return f"{model}:{version[:12]}\u2026" if sep and len(version) > 12 else key


def _render(request: web.Request, name: str, context: dict[str, Any]) -> str:
    now = request.config_dict[keys.CLOCK].now()
    who = request.get(SIGNED_IN)
    base = {"base": PREFIX, "who": who, "now": now, "max_reason": MAX_REASON_CHARS,
            "page": None, "error": None, "error_title": None, "done": None, "notice": None}
    return request.app[TEMPLATES].get_template(name).render({**base, **context})


def template_response(request: web.Request, name: str, *, status: int = 200,
                      **context: Any) -> web.Response:
    """``name`` rendered, as an HTML response with the console's headers."""
    return web.Response(text=_render(request, name, context), status=status,
                        content_type="text/html", charset="utf-8", headers=HEADERS)


page = template_response  # a whole page; the name reads better at the call sites


def report_response(html: str) -> web.Response:
    """The shadow report page, under its own policy."""
    headers = {**HEADERS, "Content-Security-Policy": _REPORT_CSP,
               "X-Frame-Options": "SAMEORIGIN"}
    return web.Response(text=html, content_type="text/html", charset="utf-8", headers=headers)
